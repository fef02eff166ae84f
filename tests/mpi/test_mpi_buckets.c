/* tests/mpi/test_mpi_buckets.c - all-reduces fused into buckets in a job
 * (run under mpirun, tests/mpi/mpirun.sh): every process fuses alike, so
 * fused results equal unfused ones bit for bit for collectives across every
 * task, across some devices of every task, and inside one task, with sum
 * and max, fed and computed inputs and a dependent pair; the number of
 * collectives after the rewrite, from rf_graph_lower, is what the bucket
 * size implies; and a feed in one process that cuts the only path between
 * two collectives does not make that process fuse them alone (the buckets
 * are decided on the whole job's graph, before each process prunes it for
 * its own feeds and fetches); and the default size is 4 MiB across
 * processes, 1 MiB inside one. */
#include <string.h>

#include "mpi_testutil.h"
#include "ringflow/collectives.h"

#define NDEV 2 /* devices a task */
#define MAXF 512

typedef struct job_graph {
  rf_graph *g;
  rf_feed feeds[MAXF]; /* this task's */
  int nfeeds;
  rf_output fetches[MAXF]; /* this task's */
  int nfetches;
} job_graph;

static void job_free(job_graph *c) {
  for (int i = 0; i < c->nfeeds; i++) rf_tensor_release(c->feeds[i].value);
  rf_graph_free(c->g);
}

/* An input on /task:t/cpu:d: a placeholder, fed by this process when t is
 * its task, or (computed) its sum with itself, a kernel that makes its
 * output, so that the producer writes into the bucket. Every process draws
 * the same values (one seed), whichever task the input is on. */
static rf_output input(job_graph *c, uint64_t *rng, rf_dtype type, int64_t n,
                       int t, int d, bool computed) {
  char dev[MT_DEVICE_LEN];
  mt_device(t, d, dev, sizeof dev);
  assert_ok(rf_graph_push_device(c->g, dev));
  rf_output x = rf_placeholder(c->g, NULL, type, rf_shape_of(1, n));
  rf_output y = computed ? rf_add(c->g, NULL, x, x) : x;
  rf_graph_pop_device(c->g);
  rf_tensor *v = rf_test_random_tensor(rng, type, rf_shape_of(1, n), -4, 4);
  if (t == T)
    c->feeds[c->nfeeds++] = (rf_feed){x, v};
  else
    rf_tensor_release(v);
  return y;
}

/* An all-reduce of the inputs on `devs` (task * NDEV + device); this
 * task's outputs are fetched. */
static void all_reduce(job_graph *c, const char *name, const rf_output *in,
                       const int *devs, int n, rf_reduction red,
                       rf_output *out) {
  rf_output ys[64];
  rf_all_reduce_n(c->g, name, in, n, red, ys);
  for (int i = 0; i < n; i++) {
    if (out) out[i] = ys[i];
    if (devs[i] / NDEV == T) c->fetches[c->nfetches++] = ys[i];
  }
}

static int every_device(int *devs) {
  for (int i = 0; i < NT * NDEV; i++) devs[i] = i;
  return NT * NDEV;
}

/* Collectives of four keys and a dependent pair (see the file comment);
 * *fused gets the collectives a 1 MiB bucket leaves. */
static void mixed_case(job_graph *c, int *unfused, int *fused) {
  uint64_t rng = rf_test_seed();
  *c = (job_graph){.g = rf_graph_new()};
  int devs[64], n = every_device(devs);
  rf_output in[64], out[64];
  char name[32];
  for (int k = 0; k < 12; k++) { /* across every device, sum */
    for (int i = 0; i < n; i++)
      in[i] = input(c, &rng, RF_FLOAT32, 3 + 17 * k, devs[i] / NDEV,
                    devs[i] % NDEV, k % 2);
    snprintf(name, sizeof name, "sum%d", k);
    all_reduce(c, name, in, devs, n, RF_REDUCE_SUM, NULL);
  }
  for (int k = 0; k < 3; k++) { /* max */
    for (int i = 0; i < n; i++)
      in[i] = input(c, &rng, RF_FLOAT32, 40 + k, devs[i] / NDEV, devs[i] % NDEV,
                    k == 1);
    snprintf(name, sizeof name, "max%d", k);
    all_reduce(c, name, in, devs, n, RF_REDUCE_MAX, NULL);
  }
  int zeros[64];
  for (int t = 0; t < NT; t++) zeros[t] = t * NDEV; /* cpu:0 of each task */
  for (int k = 0; k < 4; k++) {
    for (int t = 0; t < NT; t++)
      in[t] = input(c, &rng, RF_FLOAT32, 100 + k, t, 0, k % 2);
    snprintf(name, sizeof name, "zero%d", k);
    all_reduce(c, name, in, zeros, NT, RF_REDUCE_SUM, NULL);
  }
  for (int t = 0; t < NT; t++) /* inside task t */
    for (int k = 0; k < 3; k++) {
      int local[NDEV];
      for (int d = 0; d < NDEV; d++) {
        local[d] = t * NDEV + d;
        in[d] = input(c, &rng, RF_FLOAT32, 8 + k, t, d, true);
      }
      snprintf(name, sizeof name, "local%d_%d", t, k);
      all_reduce(c, name, in, local, NDEV, RF_REDUCE_SUM, NULL);
    }
  /* float64: a key of their own; the second reads the first */
  for (int i = 0; i < n; i++)
    in[i] =
        input(c, &rng, RF_FLOAT64, 33, devs[i] / NDEV, devs[i] % NDEV, false);
  all_reduce(c, "dep0", in, devs, n, RF_REDUCE_SUM, out);
  for (int i = 0; i < n; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(devs[i] / NDEV, devs[i] % NDEV, dev, sizeof dev);
    assert_ok(rf_graph_push_device(c->g, dev));
    in[i] = rf_add(c->g, NULL, out[i], out[i]);
    rf_graph_pop_device(c->g);
  }
  all_reduce(c, "dep1", in, devs, n, RF_REDUCE_SUM, NULL);
  assert_graph_ok(c->g);
  *unfused = 12 + 3 + 4 + 3 * NT + 2;
  *fused = 1 + 1 + 1 + NT + 2;
}

static rf_session *job_session(const rf_graph *g, int64_t bucket_bytes) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = NDEV;
  o.collective_timeout_ms = 20000; /* processes fusing unlike would hang */
  o.collective_bucket_bytes = bucket_bytes;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

/* Two steps of c with bucket_bytes; out gets the second's fetches. */
static void run_job(job_graph *c, int64_t bucket_bytes, rf_tensor **out) {
  rf_session *s = job_session(c->g, bucket_bytes);
  for (int step = 0; step < 2; step++) {
    if (step) /* the first step's results go */
      for (int i = 0; i < c->nfetches; i++) rf_tensor_release(out[i]);
    assert_ok(rf_session_run(s, c->feeds, c->nfeeds, c->fetches, c->nfetches,
                             NULL, 0, out));
  }
  rf_session_free(s);
}

/* The distinct shared names of the AllReduce nodes of the whole job's graph
 * lowered with bucket_bytes (rf_graph_lower: before the other tasks' nodes
 * leave). Collective: every process calls it. */
static int count_all_reduces(const rf_graph *g, int64_t bucket_bytes) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = NDEV;
  o.collective_bucket_bytes = bucket_bytes;
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, &o, &low));
  const char *names[1024];
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *nd = rf_graph_node(low, i);
    if (strcmp(rf_node_op(nd), "AllReduce") != 0) continue;
    const char *sn;
    assert_ok(rf_node_attr_string(nd, "shared_name", &sn));
    int k = 0;
    while (k < n && strcmp(names[k], sn) != 0) k++;
    if (k == n) names[n++] = sn;
  }
  rf_graph_free(low);
  return n;
}

static void assert_same_bits(rf_tensor **a, rf_tensor **b, int n) {
  for (int i = 0; i < n; i++) {
    assert_int_equal(rf_tensor_dtype(a[i]), rf_tensor_dtype(b[i]));
    assert_int_equal(rf_tensor_nbytes(a[i]), rf_tensor_nbytes(b[i]));
    assert_memory_equal(rf_tensor_data(a[i]), rf_tensor_data(b[i]),
                        rf_tensor_nbytes(a[i]));
    rf_tensor_release(a[i]);
    rf_tensor_release(b[i]);
  }
}

static void test_fused_match_unfused_bitwise(void **state) {
  job_graph c;
  int unfused, fused;
  mixed_case(&c, &unfused, &fused);
  assert_int_equal(count_all_reduces(c.g, 0), unfused);
  assert_int_equal(count_all_reduces(c.g, 1 << 20), fused);
  static rf_tensor *a[MAXF], *b[MAXF];
  run_job(&c, 0, a);
  run_job(&c, 1 << 20, b);
  assert_same_bits(a, b, c.nfetches);
  job_free(&c);
}

static void test_collectives_left_match_the_bucket_size(void **state) {
  uint64_t rng = rf_test_seed();
  job_graph c = {.g = rf_graph_new()};
  int devs[64], n = every_device(devs);
  for (int k = 0; k < 12; k++) { /* 1 KiB each */
    rf_output in[64];
    char name[32];
    for (int i = 0; i < n; i++)
      in[i] = input(&c, &rng, RF_FLOAT32, 256, devs[i] / NDEV, devs[i] % NDEV,
                    false);
    snprintf(name, sizeof name, "g%d", k);
    all_reduce(&c, name, in, devs, n, RF_REDUCE_SUM, NULL);
  }
  assert_graph_ok(c.g);
  assert_int_equal(count_all_reduces(c.g, 0), 12);
  assert_int_equal(count_all_reduces(c.g, 4096), 3);
  assert_int_equal(count_all_reduces(c.g, 4095), 4);
  assert_int_equal(count_all_reduces(c.g, 1 << 30), 1);
  static rf_tensor *a[MAXF], *b[MAXF];
  run_job(&c, 0, a);
  run_job(&c, 4096, b);
  assert_same_bits(a, b, c.nfetches);
  job_free(&c);
}

/* The default size (RF_BUCKET_BYTES_AUTO) on CPU devices: 4 MiB for
 * all-reduces across tasks, 1 MiB inside one task. Five 1 MiB all-reduces
 * across every device fill two buckets (4 + 1); two inside each task stay
 * two. */
static void test_default_size_across_processes(void **state) {
  uint64_t rng = rf_test_seed();
  job_graph c = {.g = rf_graph_new()};
  int devs[64], n = every_device(devs);
  const int64_t mib = 262144; /* float32s */
  rf_output in[64];
  char name[32];
  for (int k = 0; k < 5; k++) {
    for (int i = 0; i < n; i++)
      in[i] = input(&c, &rng, RF_FLOAT32, mib, devs[i] / NDEV, devs[i] % NDEV,
                    true);
    snprintf(name, sizeof name, "across%d", k);
    all_reduce(&c, name, in, devs, n, RF_REDUCE_SUM, NULL);
  }
  for (int t = 0; t < NT; t++)
    for (int k = 0; k < 2; k++) {
      int local[NDEV];
      for (int d = 0; d < NDEV; d++) {
        local[d] = t * NDEV + d;
        in[d] = input(&c, &rng, RF_FLOAT32, mib, t, d, true);
      }
      snprintf(name, sizeof name, "inside%d_%d", t, k);
      all_reduce(&c, name, in, local, NDEV, RF_REDUCE_SUM, NULL);
    }
  assert_graph_ok(c.g);
  assert_int_equal(count_all_reduces(c.g, RF_BUCKET_BYTES_AUTO), 2 + 2 * NT);
  /* each _BucketPack records the size it was filled to */
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = NDEV;
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(c.g, &o, &low));
  int packs = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *nd = rf_graph_node(low, i);
    if (strcmp(rf_node_op(nd), "_BucketPack") != 0) continue;
    int64_t limit = -1;
    assert_ok(rf_node_attr_int(nd, "limit", &limit));
    bool across = strncmp(rf_node_name(nd), "across", 6) == 0;
    assert_int_equal(limit, across ? 4 << 20 : 1 << 20);
    packs++;
  }
  assert_true(packs > 0);
  rf_graph_free(low);
  assert_int_equal(count_all_reduces(c.g, 1 << 20), 5 + 2 * NT);
  assert_int_equal(count_all_reduces(c.g, 4 << 20), 2 + NT);
  job_free(&c);
}

/* a, then m = a + a on task 0's cpu:0, which b reads there: a and b are
 * joined by a path and never fuse. Task 0 feeds m, which cuts the path in
 * its own pruned graph only; deciding there, it alone would fuse them and
 * wait for a bucket no other process joins. */
static void test_a_feed_that_cuts_a_path_fuses_alike(void **state) {
  uint64_t rng = rf_test_seed();
  job_graph c = {.g = rf_graph_new()};
  int devs[64], n = every_device(devs);
  rf_output in[64], out[64];
  for (int i = 0; i < n; i++)
    in[i] =
        input(&c, &rng, RF_FLOAT32, 64, devs[i] / NDEV, devs[i] % NDEV, false);
  all_reduce(&c, "a", in, devs, n, RF_REDUCE_SUM, out);
  for (int i = 1; i < n; i++)
    in[i] =
        input(&c, &rng, RF_FLOAT32, 64, devs[i] / NDEV, devs[i] % NDEV, false);
  assert_ok(rf_graph_push_device(c.g, "/task:0/cpu:0"));
  in[0] = rf_add(c.g, "m", out[0], out[0]);
  rf_graph_pop_device(c.g);
  all_reduce(&c, "b", in, devs, n, RF_REDUCE_SUM, NULL);
  assert_graph_ok(c.g);
  if (T == 0) {
    rf_tensor *v =
        rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 64), -4, 4);
    c.feeds[c.nfeeds++] = (rf_feed){in[0], v};
  }
  assert_int_equal(count_all_reduces(c.g, 1 << 20), 2);
  static rf_tensor *a[MAXF], *b[MAXF];
  run_job(&c, 0, a);
  run_job(&c, 1 << 20, b);
  assert_same_bits(a, b, c.nfetches);
  job_free(&c);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fused_match_unfused_bitwise),
      cmocka_unit_test(test_collectives_left_match_the_bucket_size),
      cmocka_unit_test(test_a_feed_that_cuts_a_path_fuses_alike),
      cmocka_unit_test(test_default_size_across_processes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
