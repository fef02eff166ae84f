/* tests/mpi/test_mpi_job.c - a session as one task of an MPI job (run under
 * mpirun, tests/mpi/mpirun.sh): rank and size, the other tasks' devices in
 * placement, an all-reduce across every task against a float64 reference,
 * a job session that keeps working across steps, a large all-reduce (the
 * ring) with the same bytes in every process, two job sessions running
 * reduces (blocking MPI calls on each session's data thread) from two
 * threads at once, and the errors of a whole job graph: a fetch or feed on
 * another task, a data edge between tasks, a task or device the job does
 * not have; collective names of 600 to 100000 characters. */
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_testutil.h"
#include "ringflow/collectives.h"

static void test_tasks(void **state) {
  int t = -1, n = -1;
  assert_ok(rf_job_tasks(&t, &n));
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  const char *size = getenv("OMPI_COMM_WORLD_SIZE");
  if (rank) assert_int_equal(t, atoi(rank));
  if (size) assert_int_equal(n, atoi(size));
  assert_true(t >= 0 && t < n && n >= 2);
}

/* x[t][d] on /task:t/cpu:d for every task and 2 devices; the all-reduce of
 * all of them; this task feeds and fetches its two. */
static void test_all_reduce_every_task(void **state) {
  uint64_t rng = rf_test_seed();
  rf_graph *g = rf_graph_new();
  rf_output xs[128], ys[128];
  rf_tensor *in[128];
  int n = 2 * NT;
  for (int i = 0; i < n; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(i / 2, i % 2, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(2, 3, 5));
    rf_graph_pop_device(g);
    in[i] =
        rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 3, 5), -1, 1);
  }
  rf_all_reduce_n(g, "sum_all", xs, n, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  double want[15];
  for (int e = 0; e < 15; e++) {
    want[e] = 0;
    for (int i = 0; i < n; i++) want[e] += rf_tensor_get(in[i], e);
  }
  rf_session *s = mt_session(g, 2, 20000);
  for (int step = 0; step < 3; step++) { /* steps stay in step */
    rf_feed feeds[2] = {{xs[2 * T], in[2 * T]}, {xs[2 * T + 1], in[2 * T + 1]}};
    rf_tensor *out[2];
    assert_ok(rf_session_run(s, feeds, 2, &ys[2 * T], 2, NULL, 0, out));
    for (int k = 0; k < 2; k++) {
      assert_tensor_near(out[k], rf_shape_of(2, 3, 5), want, 1e-12);
      rf_tensor_release(out[k]);
    }
  }
  rf_session_free(s);
  for (int i = 0; i < n; i++) rf_tensor_release(in[i]);
  rf_graph_free(g);
}

/* FNV-1a of a tensor's bytes. */
static uint64_t bytes_hash(const rf_tensor *t) {
  uint64_t h = 1469598103934665603ULL;
  const unsigned char *b = rf_tensor_data(t);
  for (size_t k = 0; k < rf_tensor_nbytes(t); k++)
    h = (h ^ b[k]) * 1099511628211ULL;
  return h;
}

/* An all-reduce large enough for OpenMPI's ring (from 256 KiB, see
 * src/comm/mpi/nbc_algorithm.c), 2 devices a task: near a float64
 * reference, and the same bytes in every process (compared through MPI
 * itself, which the library initialised with MPI_THREAD_MULTIPLE). */
static void test_large_all_reduce_same_bits_everywhere(void **state) {
  uint64_t rng = rf_test_seed();
  const int64_t n = (int64_t)1 << 17; /* 512 KiB of float32 */
  rf_graph *g = rf_graph_new();
  rf_output xs[128], ys[128];
  rf_tensor *in[128];
  int nd = 2 * NT;
  for (int i = 0; i < nd; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(i / 2, i % 2, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(1, n));
    rf_graph_pop_device(g);
    in[i] = rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, n), -1, 1);
  }
  rf_all_reduce_n(g, "big", xs, nd, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  double *want = malloc(sizeof(double) * (size_t)n);
  assert_non_null(want);
  for (int64_t e = 0; e < n; e++) {
    want[e] = 0;
    for (int i = 0; i < nd; i++) want[e] += rf_tensor_get(in[i], e);
  }
  rf_session *s = mt_session(g, 2, 20000);
  for (int step = 0; step < 2; step++) {
    rf_feed feeds[2] = {{xs[2 * T], in[2 * T]}, {xs[2 * T + 1], in[2 * T + 1]}};
    rf_tensor *out[2];
    assert_ok(rf_session_run(s, feeds, 2, &ys[2 * T], 2, NULL, 0, out));
    assert_tensor_near(out[0], rf_shape_of(1, n), want, 1e-4);
    assert_memory_equal(rf_tensor_data(out[0]), rf_tensor_data(out[1]),
                        rf_tensor_nbytes(out[0]));
    unsigned long long h = bytes_hash(out[0]), lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN,
                  MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX,
                  MPI_COMM_WORLD);
    assert_true(lo == h && hi == h);
    for (int k = 0; k < 2; k++) rf_tensor_release(out[k]);
  }
  rf_session_free(s);
  free(want);
  for (int i = 0; i < nd; i++) rf_tensor_release(in[i]);
  rf_graph_free(g);
}

/* One placeholder per task (cpu:0) and its Neg; the all-reduce keeps the
 * job session a job. */
typedef struct small {
  rf_graph *g;
  rf_output x[64], neg[64], y[64];
} small;

static void small_graph(small *m) {
  m->g = rf_graph_new();
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(m->g, dev));
    m->x[t] = rf_placeholder(m->g, NULL, RF_FLOAT32, rf_shape_of(1, 4));
    m->neg[t] = rf_neg(m->g, NULL, m->x[t]);
    rf_graph_pop_device(m->g);
  }
  rf_all_reduce_n(m->g, "ar", m->neg, NT, RF_REDUCE_SUM, m->y);
  assert_graph_ok(m->g);
}

/* A reduce of every task's x (cpu:0) to `root`'s, n elements of task t's
 * x equal to t + 1 + i % 3: the sum is known exactly. */
typedef struct reducer {
  rf_graph *g;
  rf_session *s;
  rf_output x[64], y;
  rf_tensor *in;
  int root, steps;
  int64_t n;
  rf_status *error; /* the first failure, or a wrong sum */
} reducer;

static void reducer_init(reducer *r, const char *name, int root, int64_t n) {
  memset(r, 0, sizeof *r);
  r->root = root;
  r->n = n;
  r->steps = 40;
  r->g = rf_graph_new();
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(r->g, dev));
    r->x[t] = rf_placeholder(r->g, NULL, RF_FLOAT64, rf_shape_of(1, n));
    rf_graph_pop_device(r->g);
  }
  char dev[MT_DEVICE_LEN];
  mt_device(root, 0, dev, sizeof dev);
  assert_ok(rf_graph_push_device(r->g, dev));
  r->y = rf_reduce(r->g, name, r->x, NT, RF_REDUCE_SUM);
  rf_graph_pop_device(r->g);
  assert_graph_ok(r->g);
  rf_shape shape = rf_shape_of(1, n);
  assert_ok(rf_tensor_new(RF_FLOAT64, &shape, NULL, &r->in));
  double *d = rf_tensor_mutable_data(r->in);
  for (int64_t i = 0; i < n; i++) d[i] = T + 1 + (double)(i % 3);
}

static void *reducer_main(void *arg) {
  reducer *r = arg;
  for (int step = 0; step < r->steps && !r->error; step++) {
    rf_feed feed = {r->x[T], r->in};
    rf_tensor *out = NULL;
    r->error =
        T == r->root
            ? rf_session_run(r->s, &feed, 1, &r->y, 1, NULL, 0, &out)
            : rf_session_run(r->s, &feed, 1, NULL, 0, &r->y.node, 1, NULL);
    for (int64_t i = 0; out && !r->error && i < r->n; i++) {
      double want = NT * (NT + 1) / 2.0 + NT * (double)(i % 3);
      if (rf_tensor_get(out, i) != want)
        r->error =
            rf_status_new(RF_INTERNAL,
                          "step %d: element %lld is %g, "
                          "expected %g",
                          step, (long long)i, rf_tensor_get(out, i), want);
    }
    rf_tensor_release(out);
  }
  return NULL;
}

/* Two sessions, each reducing 512 KiB (a blocking MPI_Reduce: from 256 KiB
 * on, src/comm/mpi/algorithm.c) to a different root 40 times, run from
 * two threads at once: each process may start the two sessions' blocking
 * MPI_Reduce calls in either order, and each session's call runs on its own
 * data thread, so neither waits behind the other (with one data thread for
 * the process, two processes that started them in opposite orders would
 * wait on each other until the timeout). */
static void test_sessions_reduce_concurrently(void **state) {
  reducer r[2];
  reducer_init(&r[0], "reduce_a", 0, (int64_t)1 << 16);
  reducer_init(&r[1], "reduce_b", NT - 1, (int64_t)1 << 16);
  for (int k = 0; k < 2; k++) r[k].s = mt_session(r[k].g, 1, 30000);
  pthread_t th[2];
  for (int k = 0; k < 2; k++)
    assert_int_equal(pthread_create(&th[k], NULL, reducer_main, &r[k]), 0);
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < 2; k++) {
    assert_ok(r[k].error);
    rf_session_free(r[k].s);
    rf_tensor_release(r[k].in);
    rf_graph_free(r[k].g);
  }
}

static void test_remote_fetch_and_feed_are_errors(void **state) {
  small m;
  small_graph(&m);
  rf_session *s = mt_session(m.g, 1, 20000);
  int other = (T + 1) % NT;
  rf_tensor *v, *out;
  rf_shape shape = rf_shape_of(1, 4);
  assert_ok(rf_tensor_new(RF_FLOAT32, &shape, NULL, &v));
  memset(rf_tensor_mutable_data(v), 0, rf_tensor_nbytes(v));
  rf_feed own = {m.x[T], v}, theirs = {m.x[other], v};
  assert_status(rf_session_run(s, &own, 1, &m.neg[other], 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "fetches only outputs of its own task");
  assert_status(rf_session_run(s, &theirs, 1, &m.neg[T], 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "feeds only nodes of its own task");
  /* A target on another task asks for this task's part of it: none. */
  assert_ok(rf_session_run(s, &own, 1, NULL, 0, &m.neg[other].node, 1, NULL));
  /* ... and the session still works: every task runs the same steps. */
  assert_ok(rf_session_run(s, &own, 1, &m.y[T], 1, NULL, 0, &out));
  assert_true(rf_tensor_get(out, 0) == 0);
  rf_tensor_release(out);
  rf_session_free(s);
  rf_tensor_release(v);
  rf_graph_free(m.g);
}

/* A fetch of a Broadcast whose root is on task 0, from the other tasks: the
 * error names the Broadcast, not its input, which lowering gives the
 * root's consumers in its place. Task 0 fetches its own and fails as the
 * others tell it; then every task runs a good step. */
static void test_remote_broadcast_fetch_names_it(void **state) {
  rf_graph *g = rf_graph_new();
  char dev[MT_DEVICE_LEN];
  mt_device(0, 0, dev, sizeof dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output b =
      rf_broadcast(g, "bcast", rf_const_scalar(g, "c", RF_FLOAT32, 2));
  rf_graph_pop_device(g);
  rf_output use[64];
  for (int t = 0; t < NT; t++) {
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    use[t] = rf_identity(g, NULL, b);
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
  rf_session *s = mt_session(g, 1, 20000);
  rf_tensor *out = NULL;
  rf_status *st = rf_session_run(s, NULL, 0, &b, 1, NULL, 0, &out);
  if (T != 0)
    assert_status(st, RF_INVALID_ARGUMENT,
                  "fetch of node 'bcast' (Broadcast) on /task:0/cpu:0: a "
                  "process fetches only outputs of its own task");
  else if (st)
    rf_status_free(st);
  else
    rf_tensor_release(out);
  assert_ok(rf_session_run(s, NULL, 0, &use[T], 1, NULL, 0, &out));
  assert_true(rf_tensor_get(out, 0) == 2);
  rf_tensor_release(out);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_data_edge_between_tasks_is_an_error(void **state) {
  small m;
  small_graph(&m);
  char dev[MT_DEVICE_LEN];
  mt_device(1, 0, dev, sizeof dev);
  assert_ok(rf_graph_push_device(m.g, dev));
  rf_output z = rf_add(m.g, "z", m.neg[0], m.neg[1]);
  rf_graph_pop_device(m.g);
  assert_graph_ok(m.g);
  rf_session *s = mt_session(m.g, 1, 20000);
  rf_tensor *v, *out;
  rf_shape shape = rf_shape_of(1, 4);
  assert_ok(rf_tensor_new(RF_FLOAT32, &shape, NULL, &v));
  memset(rf_tensor_mutable_data(v), 0, rf_tensor_nbytes(v));
  rf_feed own = {m.x[T], v};
  /* task 1 computes z from task 0's Neg: only task 1's run needs it */
  rf_status *st =
      rf_session_run(s, &own, 1, T == 1 ? &z : &m.neg[T], 1, NULL, 0, &out);
  if (T == 1) {
    assert_status(st, RF_INVALID_ARGUMENT,
                  "tensors cross processes only through collectives");
  } else {
    assert_ok(st);
    rf_tensor_release(out);
  }
  rf_session_free(s);
  rf_graph_free(m.g);

  /* zf on task 1 reads task 0's placeholder, which task 0 feeds: every
   * task runs zf as its target and every one refuses it alike (task 2 too,
   * where both ends are other tasks' nodes), naming the placeholder, not
   * the _Arg that stands for the fed value in task 0. */
  small_graph(&m);
  assert_ok(rf_graph_push_device(m.g, dev));
  rf_output zf = rf_add(m.g, "zf", m.x[0], m.x[1]);
  rf_graph_pop_device(m.g);
  assert_graph_ok(m.g);
  s = mt_session(m.g, 1, 20000);
  own = (rf_feed){m.x[T], v};
  char want[200];
  snprintf(want, sizeof want,
           "node 'zf' (Add) on /task:1/cpu:0 reads node "
           "'%s' (Placeholder) on /task:0/cpu:0: tensors cross processes",
           rf_node_name(m.x[0].node));
  st = rf_session_run(s, &own, 1, NULL, 0, &zf.node, 1, NULL);
  assert_status(st, RF_INVALID_ARGUMENT, want);
  rf_session_free(s);
  rf_tensor_release(v);
  rf_graph_free(m.g);
}

/* Collective names of any length stay whole across processes (keys and
 * control messages): two all-reduces over every task whose names share all
 * but their last character are two collectives, each with its own sum. */
static void test_long_names_across_tasks(void **state) {
  static const size_t lens[] = {600, 5000, 100000};
  uint64_t rng = rf_test_seed() + 11;
  for (size_t c = 0; c < sizeof lens / sizeof *lens; c++) {
    size_t len = lens[c];
    char *names[2];
    rf_graph *g = rf_graph_new();
    int n = 2 * NT;
    rf_output xs[2][128], ys[2][128];
    rf_tensor *in[2][128];
    for (int k = 0; k < 2; k++) {
      names[k] = malloc(len + 1);
      memset(names[k], 'n', len - 1);
      names[k][len - 1] = (char)('a' + k);
      names[k][len] = '\0';
      for (int i = 0; i < n; i++) {
        char dev[MT_DEVICE_LEN];
        mt_device(i / 2, i % 2, dev, sizeof dev);
        assert_ok(rf_graph_push_device(g, dev));
        xs[k][i] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(1, 3));
        rf_graph_pop_device(g);
        in[k][i] =
            rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, 3), -1, 1);
      }
      rf_all_reduce_n(g, names[k], xs[k], n, RF_REDUCE_SUM, ys[k]);
    }
    assert_graph_ok(g);
    rf_session *s = mt_session(g, 2, 20000);
    rf_feed feeds[4];
    rf_output fetch[4];
    for (int k = 0; k < 2; k++)
      for (int d = 0; d < 2; d++) {
        feeds[2 * k + d] = (rf_feed){xs[k][2 * T + d], in[k][2 * T + d]};
        fetch[2 * k + d] = ys[k][2 * T + d];
      }
    rf_tensor *out[4];
    rf_status *st = rf_session_run(s, feeds, 4, fetch, 4, NULL, 0, out);
    if (st) {
      const char *m = rf_status_message(st);
      size_t k = strlen(m);
      fail_msg("names of %zu characters: ...%s", len,
               k > 300 ? m + k - 300 : m);
    }
    for (int k = 0; k < 2; k++) {
      double want[3] = {0};
      for (int i = 0; i < n; i++)
        for (int e = 0; e < 3; e++) want[e] += rf_tensor_get(in[k][i], e);
      for (int d = 0; d < 2; d++) {
        assert_tensor_near(out[2 * k + d], rf_shape_of(1, 3), want, 1e-12);
        rf_tensor_release(out[2 * k + d]);
      }
      for (int i = 0; i < n; i++) rf_tensor_release(in[k][i]);
      free(names[k]);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* Known before any run: rf_session_new refuses the graph in every process
 * (each builds the same graph, so each says the same). */
static void test_missing_task_or_device_is_an_error(void **state) {
  rf_graph *g = rf_graph_new();
  char dev[MT_DEVICE_LEN];
  snprintf(dev, sizeof dev, "/task:%d/cpu:0", NT);
  assert_ok(rf_graph_push_device(g, dev));
  rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 4));
  rf_graph_pop_device(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  o.collective_timeout_ms = 20000;
  rf_session *s = NULL;
  char want[64];
  snprintf(want, sizeof want, "task %d of %d", T, NT);
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT, want);
  assert_null(s);
  rf_graph_free(g);
  g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "/task:1/cpu:3")); /* tasks have 2 */
  rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 4));
  rf_graph_pop_device(g);
  o.num_cpu_devices = 2;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "/task:1/cpu:0../task:1/cpu:1");
  assert_null(s);
  rf_graph_free(g);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tasks),
      cmocka_unit_test(test_all_reduce_every_task),
      cmocka_unit_test(test_large_all_reduce_same_bits_everywhere),
      cmocka_unit_test(test_sessions_reduce_concurrently),
      cmocka_unit_test(test_remote_fetch_and_feed_are_errors),
      cmocka_unit_test(test_remote_broadcast_fetch_names_it),
      cmocka_unit_test(test_data_edge_between_tasks_is_an_error),
      cmocka_unit_test(test_missing_task_or_device_is_an_error),
      cmocka_unit_test(test_long_names_across_tasks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
