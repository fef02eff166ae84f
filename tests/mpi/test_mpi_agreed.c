/* tests/mpi/test_mpi_agreed.c - collectives agreed once, run many times
 * (docs/MULTIPROCESS.md, "Agreed once"), under mpirun; test_mpi_agreed_off
 * runs it again with RF_MPI_AGREE_ONCE=0 (every step through task 0), where
 * the same checks hold except the message counts, which then show the
 * round trip every step:
 *  - the first step sends one READY per collective from every task and one
 *    GO per task from task 0; later steps with the same descriptors send
 *    none (rf_debug_control_messages), or the same again without agree-once,
 *    and give the float64 reference; likewise for all five kinds;
 *  - every task changes its shape in a late step, or in every step: it goes
 *    through task 0 again, the result is right, and a shape that stays is
 *    then kept agreed;
 *  - one task (task 1, task 0, the last) changes its shape in a late step:
 *    every process fails naming the shape, both values and the task, at
 *    once, and the next steps work (and are steady again);
 *  - one task skips a late step: the others fail within the timeout naming
 *    it and its devices, and the next step works; when it goes on at once
 *    (its next step's collectives meet the others' skipped ones), the next
 *    steps work or blame it, never a task that came;
 *  - steady-state steps run on the thread that completed the local group
 *    (the direct path, counted), and one task arriving late makes the
 *    others hand their ops to the communication thread, with the same
 *    results. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/op.h"
#include "mpi_testutil.h"
#include "ringflow/collectives.h"
#include "ringflow/debug.h"

static bool once; /* agree-once on (RF_MPI_AGREE_ONCE not 0) */

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* x[t][d] (float64, length unknown) on /task:t/cpu:d, d < 2, reshaped to
 * (rows, 4), all-reduced (sum) as "ar" and all-gathered as "ag". */
typedef struct job_graph {
  rf_graph *g;
  rf_output x[128], ar[128], ag[128];
} job_graph;

static void build(job_graph *m) {
  m->g = rf_graph_new();
  rf_output r[128];
  for (int i = 0; i < 2 * NT; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(i / 2, i % 2, dev, sizeof dev);
    assert_ok(rf_graph_push_device(m->g, dev));
    m->x[i] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(1, -1));
    int64_t dims[2] = {-1, 4};
    r[i] = rf_reshape_to(m->g, NULL, m->x[i], 2, dims);
    rf_graph_pop_device(m->g);
  }
  rf_all_reduce_n(m->g, "ar", r, 2 * NT, RF_REDUCE_SUM, m->ar);
  rf_all_gather_n(m->g, "ag", r, 2 * NT, m->ag);
  assert_graph_ok(m->g);
}

/* Participant i's value at element e of job step k: small integers, so the
 * float64 sums are exact whatever the order. */
static double value(int i, int64_t e, int k, unsigned seed) {
  return (double)((seed + 7u * (unsigned)i + 13u * (unsigned)e +
                   31u * (unsigned)k) %
                  1000u);
}

/* This task's run of job step k, n elements per device; checks both
 * collectives against the reference on success. */
static rf_status *step(job_graph *m, rf_session *s, int k, int64_t n) {
  unsigned seed = (unsigned)rf_test_seed();
  rf_tensor *in[2], *out[4] = {0};
  rf_feed feeds[2];
  for (int d = 0; d < 2; d++) {
    int i = 2 * T + d;
    rf_shape sh = rf_shape_of(1, n);
    assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &in[d]));
    double *p = rf_tensor_mutable_data(in[d]);
    for (int64_t e = 0; e < n; e++) p[e] = value(i, e, k, seed);
    feeds[d] = (rf_feed){m->x[i], in[d]};
  }
  rf_output fetch[4] = {m->ar[2 * T], m->ar[2 * T + 1], m->ag[2 * T],
                        m->ag[2 * T + 1]};
  rf_status *st = rf_session_run(s, feeds, 2, fetch, 4, NULL, 0, out);
  for (int f = 0; !st && f < 4; f++) {
    const double *y = rf_tensor_data(out[f]);
    if (f < 2) {
      assert_int_equal(rf_tensor_num_elements(out[f]), n);
      for (int64_t e = 0; e < n; e++) {
        double want = 0;
        for (int i = 0; i < 2 * NT; i++) want += value(i, e, k, seed);
        assert_true(y[e] == want);
      }
    } else {
      assert_int_equal(rf_tensor_num_elements(out[f]), n * 2 * NT);
      for (int i = 0; i < 2 * NT; i++)
        for (int64_t e = 0; e < n; e++)
          assert_true(y[i * n + e] == value(i, e, k, seed));
    }
  }
  for (int f = 0; f < 4; f++) rf_tensor_release(out[f]);
  rf_tensor_release(in[0]);
  rf_tensor_release(in[1]);
  return st;
}

/* Control messages this process sends for a step of `ncoll` collectives
 * over every task that goes through task 0: a READY each, and task 0 a GO
 * to every task (itself included) each. */
static int64_t round_trip(int ncoll) {
  return T == 0 ? ncoll * (1 + NT) : ncoll;
}

/* Runs job step k (n elements) and returns the control messages it sent. */
static int64_t counted_step(job_graph *m, rf_session *s, int k, int64_t n) {
  int64_t before = rf_debug_control_messages();
  assert_ok(step(m, s, k, n));
  return rf_debug_control_messages() - before;
}

static void test_steady_state_sends_no_message(void **state) {
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  /* the first step: agreed through task 0 */
  assert_int_equal(counted_step(&m, s, 0, 8), round_trip(2));
  for (int k = 1; k < 6; k++) /* no round trip, unless agree-once is off */
    assert_int_equal(counted_step(&m, s, k, 8), once ? 0 : round_trip(2));
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* Reduce to the last task, broadcast from task 0, reduce-scatter, one
 * device a task: after the first step no message either. */
static void test_every_kind_steady(void **state) {
  enum { ROWS = 3 };
  rf_output x[64], rs[64], here_bc = {0};
  assert_true(NT <= 64);
  rf_graph *g = rf_graph_new();
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    x[t] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(2, NT * ROWS, 2));
    rf_graph_pop_device(g);
  }
  char last[MT_DEVICE_LEN];
  mt_device(NT - 1, 0, last, sizeof last);
  assert_ok(rf_graph_push_device(g, last));
  rf_output red = rf_reduce(g, "rd", x, NT, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  rf_output bc = rf_broadcast(g, "bc", x[0]);
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    rf_output y = rf_identity(g, NULL, bc);
    rf_graph_pop_device(g);
    if (t == T) here_bc = y;
  }
  rf_reduce_scatter_n(g, "rs", x, NT, RF_REDUCE_SUM, rs);
  assert_graph_ok(g);
  rf_session *s = mt_session(g, 1, 30000);
  unsigned seed = (unsigned)rf_test_seed();
  const int64_t n = NT * ROWS * 2;
  for (int k = 0; k < 5; k++) {
    rf_tensor *in, *out[3] = {0};
    rf_shape sh = rf_shape_of(2, NT * ROWS, 2);
    assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &in));
    double *p = rf_tensor_mutable_data(in);
    for (int64_t e = 0; e < n; e++) p[e] = value(T, e, k, seed);
    rf_feed feed = {x[T], in};
    rf_output fetch[3] = {here_bc, rs[T], red};
    bool root = T == NT - 1;
    int64_t before = rf_debug_control_messages();
    assert_ok(rf_session_run(s, &feed, 1, fetch, root ? 3 : 2,
                             root ? NULL : &red.node, root ? 0 : 1, out));
    int64_t sent = rf_debug_control_messages() - before;
    assert_int_equal(sent, k == 0 || !once ? round_trip(3) : 0);
    const double *b = rf_tensor_data(out[0]), *r = rf_tensor_data(out[1]);
    for (int64_t e = 0; e < n; e++) assert_true(b[e] == value(0, e, k, seed));
    for (int64_t e = 0; e < ROWS * 2; e++) {
      double want = 0;
      for (int t = 0; t < NT; t++) want += value(t, T * ROWS * 2 + e, k, seed);
      assert_true(r[e] == want);
    }
    if (root) {
      const double *y = rf_tensor_data(out[2]);
      for (int64_t e = 0; e < n; e++) {
        double want = 0;
        for (int t = 0; t < NT; t++) want += value(t, e, k, seed);
        assert_true(y[e] == want);
      }
    }
    for (int f = 0; f < 3; f++) rf_tensor_release(out[f]);
    rf_tensor_release(in);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_shape_change_everywhere_falls_back(void **state) {
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  for (int k = 0; k < 3; k++) assert_ok(step(&m, s, k, 8));
  /* (3, 4) everywhere: through task 0 */
  assert_int_equal(counted_step(&m, s, 3, 12), round_trip(2));
  for (int k = 4; k < 7; k++) /* kept */
    assert_int_equal(counted_step(&m, s, k, 12), once ? 0 : round_trip(2));
  assert_ok(step(&m, s, 7, 4));
  assert_ok(step(&m, s, 8, 4));
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* A new shape in every step, the same in every task: each goes through
 * task 0 and gives the right result; a shape that then stays is kept. */
static void test_shape_changing_every_step(void **state) {
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  const int64_t n[] = {8, 12, 4, 16, 8, 20};
  for (int k = 0; k < 6; k++)
    assert_int_equal(counted_step(&m, s, k, n[k]), round_trip(2));
  for (int k = 6; k < 9; k++)
    assert_int_equal(counted_step(&m, s, k, 20), once ? 0 : round_trip(2));
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* Task `who` feeds (3, 4) where the others feed (2, 4), in job step k:
 * every process fails at once, naming the shape, both values and a device
 * of each side (who's among them). */
static void changed_in_one_task(job_graph *m, rf_session *s, int k, int who) {
  double t0 = now_ms();
  rf_status *st = step(m, s, k, T == who ? 12 : 8);
  const char *msg = rf_status_message(st);
  char want[64];
  snprintf(want, sizeof want, "(3, 4) on /task:%d/cpu:", who);
  assert_contains(msg, want);
  assert_contains(msg, "(2, 4) on /task:");
  assert_status(st, RF_INVALID_ARGUMENT, "participants disagree on shape");
  assert_true(now_ms() - t0 < 15000); /* at once, not at the timeout */
}

static void test_late_change_in_one_task_is_named(void **state) {
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  const int64_t steady = once ? 0 : round_trip(2);
  for (int k = 0; k < 4; k++) assert_ok(step(&m, s, k, 8));
  /* Every task reached both collectives of the failed step, so the entries
   * stay agreed. The step after a failure may still carry its tail (a
   * collective whose check was under way when the run failed sends its
   * READY before the next op of its name); the one after that is steady,
   * which also shows that a failed run returned only after its failure
   * messages were sent (rf__job_settle): none lands in a later step. */
  changed_in_one_task(&m, s, 4, 1);
  assert_ok(step(&m, s, 5, 8));
  assert_int_equal(counted_step(&m, s, 6, 8), steady);
  /* the coordinator itself, then the last task */
  changed_in_one_task(&m, s, 7, 0);
  assert_ok(step(&m, s, 8, 8));
  assert_int_equal(counted_step(&m, s, 9, 8), steady);
  changed_in_one_task(&m, s, 10, NT - 1);
  assert_ok(step(&m, s, 11, 8));
  assert_int_equal(counted_step(&m, s, 12, 8), steady);
  rf_session_free(s);
  rf_graph_free(m.g);
}

static void test_task_skipping_a_late_step_is_named(void **state) {
  job_graph m;
  build(&m);
  const int64_t timeout = 2000;
  rf_session *s = mt_session(m.g, 2, timeout);
  for (int k = 0; k < 3; k++) assert_ok(step(&m, s, k, 8));
  int skip = NT - 1;
  if (T == skip) { /* a step of its own, without the collectives */
    rf_tensor *a, *out;
    rf_shape sh = rf_shape_of(1, 4);
    assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &a));
    memset(rf_tensor_mutable_data(a), 0, rf_tensor_nbytes(a));
    rf_feed feed = {m.x[2 * T], a};
    assert_ok(rf_session_run(s, &feed, 1, &m.x[2 * T], 1, NULL, 0, &out));
    rf_tensor_release(out);
    rf_tensor_release(a);
    struct timespec ts = {2, 500000000}; /* the others give up meanwhile */
    nanosleep(&ts, NULL);
  } else {
    double t0 = now_ms();
    rf_status *st = step(&m, s, 3, 8);
    char want[128];
    snprintf(want, sizeof want,
             "waiting for task %d (/task:%d/cpu:0, /task:%d/cpu:1)", skip, skip,
             skip);
    assert_contains(rf_status_message(st), "2 of");
    /* alive (its communication thread answered the PING), not dead: said
     * on both paths (a member's steady-state check, task 0's) */
    char alive[128];
    snprintf(alive, sizeof alive,
             "(task %d answers: it has not reached this collective", skip);
    assert_contains(rf_status_message(st), alive);
    assert_status(st, RF_DEADLINE_EXCEEDED, want);
    /* named within the timeout, plus the 1 s probe of the missing tasks
     * that task 0's coordinator makes on the READY/GO path (and some slack
     * for a loaded machine) */
    assert_true(now_ms() - t0 < (double)timeout + (once ? 1000 : 2000));
  }
  assert_ok(step(&m, s, 4, 8)); /* everyone again */
  assert_ok(step(&m, s, 5, 8));
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* The same, but the task that skips goes on at once (as a program would):
 * its next step's collectives meet the others' skipped ones. Every
 * failure must blame the task that skipped, never a task that came (the
 * others are held up in the skipped step, waiting for it), and the steps
 * after work. */
static void test_task_skipping_and_going_on_is_blamed(void **state) {
  job_graph m;
  build(&m);
  const int64_t timeout = 2000;
  rf_session *s = mt_session(m.g, 2, timeout);
  for (int k = 0; k < 3; k++) assert_ok(step(&m, s, k, 8));
  int skip = NT - 1;
  char skipper[64];
  snprintf(skipper, sizeof skipper, "task %d", skip);
  if (T == skip) { /* a step of its own, without the collectives */
    rf_tensor *a, *out;
    rf_shape sh = rf_shape_of(1, 4);
    assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &a));
    memset(rf_tensor_mutable_data(a), 0, rf_tensor_nbytes(a));
    rf_feed feed = {m.x[2 * T], a};
    assert_ok(rf_session_run(s, &feed, 1, &m.x[2 * T], 1, NULL, 0, &out));
    rf_tensor_release(out);
    rf_tensor_release(a);
  } else {
    rf_status *st = step(&m, s, 3, 8);
    char want[128];
    snprintf(want, sizeof want, "waiting for task %d (/task:%d/cpu:0", skip,
             skip);
    assert_status(st, RF_DEADLINE_EXCEEDED, want);
  }
  /* The next step: it may work or fail; a failure names the task that
   * skipped and no other task as missing. */
  for (int k = 4; k < 6; k++) {
    rf_status *st = step(&m, s, k, 8);
    if (getenv("RF_TEST_VERBOSE"))
      fprintf(stderr, "task %d step %d: %s\n", T, k,
              st ? rf_status_message(st) : "ok");
    if (st) {
      const char *msg = rf_status_message(st);
      assert_contains(msg, skipper);
      for (int t = 0; t < NT; t++) {
        char wrong[64];
        snprintf(wrong, sizeof wrong, "waiting for task %d (", t);
        if (t != skip && strstr(msg, wrong))
          fail_msg("task %d step %d blames task %d: %s", T, k, t, msg);
      }
      rf_status_free(st);
    }
  }
  for (int k = 6; k < 8; k++) assert_ok(step(&m, s, k, 8)); /* all again */
  rf_session_free(s);
  rf_graph_free(m.g);
}

static void test_steady_state_runs_direct(void **state) {
  if (!once) {
    skip(); /* no agreed collectives: nothing runs on the direct path */
    return;
  }
  rf__mpi_direct_force(1);
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  assert_ok(step(&m, s, 0, 8)); /* agreed through task 0 */
  int64_t taken = rf__mpi_direct_taken();
  for (int k = 1; k < 6; k++) assert_ok(step(&m, s, k, 8));
  /* MPI_THREAD_MULTIPLE (mpirun gives it): both collectives, every step */
  assert_int_equal(rf__mpi_direct_taken() - taken, 2 * 5);
  rf_session_free(s);
  rf_graph_free(m.g);
  rf__mpi_direct_force(-1);
}

static void test_late_task_hands_back(void **state) {
  if (!once) {
    skip(); /* no agreed collectives: nothing runs on the direct path */
    return;
  }
  rf__mpi_direct_force(1);
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  for (int k = 0; k < 2; k++) assert_ok(step(&m, s, k, 8));
  int64_t taken = rf__mpi_direct_taken(), back = rf__mpi_direct_handed_back(),
          msgs = rf_debug_control_messages();
  if (T == 0) { /* far longer than the direct path spins (2 ms) */
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
  }
  assert_ok(step(&m, s, 2, 8));
  assert_int_equal(rf__mpi_direct_taken() - taken, 2);
  if (T != 0) assert_true(rf__mpi_direct_handed_back() > back);
  for (int k = 3; k < 6; k++) assert_ok(step(&m, s, k, 8));
  assert_int_equal(rf_debug_control_messages() - msgs, 0); /* still agreed */
  rf_session_free(s);
  rf_graph_free(m.g);
  rf__mpi_direct_force(-1);
}

/* Steady-state data go with their check (one MPI round, not the check's
 * and then the data's): with task 0 300 ms late, every other task issues
 * both collectives' data while their checks wait for task 0 - small ones
 * on the direct path, large ones (a 128 KiB all-reduce, a 512 KiB or 1 MiB
 * all-gather: past the direct path's limit, here set to 64 KiB) on the
 * communication thread; no control message. A shape changed in one task in a
 * late large step (its data a stand-in of the agreed call) is still named at
 * once, and the collectives are steady again after. */
static void late_task_0(job_graph *m, rf_session *s, int k, int64_t n) {
  int64_t with = rf__mpi_agreed_with_check(),
          msgs = rf_debug_control_messages();
  if (T == 0) { /* far longer than a local reduction takes */
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
  }
  assert_ok(step(m, s, k, n));
  assert_int_equal(rf_debug_control_messages() - msgs, 0);
  if (T != 0) assert_int_equal(rf__mpi_agreed_with_check() - with, 2);
}

static void test_data_go_with_the_check(void **state) {
  if (!once) {
    skip(); /* no agreed collectives: no checks */
    return;
  }
  rf__mpi_direct_force(1);
  rf__mpi_direct_max_force(65536);
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  int k = 0;
  const int64_t sizes[2] = {8, 16384}; /* float64s a device */
  for (int z = 0; z < 2; z++) {
    assert_ok(step(&m, s, k++, sizes[z])); /* agreed through task 0 */
    assert_ok(step(&m, s, k++, sizes[z]));
    late_task_0(&m, s, k++, sizes[z]);
  }
  int64_t n = sizes[1];
  double t0 = now_ms();
  rf_status *st = step(&m, s, k++, T == NT - 1 ? n + 4 : n);
  assert_status(st, RF_INVALID_ARGUMENT, "participants disagree on shape");
  assert_true(now_ms() - t0 < 15000); /* at once, not at the timeout */
  assert_ok(step(&m, s, k++, n));
  late_task_0(&m, s, k++, n);
  rf_session_free(s);
  rf_graph_free(m.g);
  rf__mpi_direct_force(-1);
  rf__mpi_direct_max_force(-1);
}

/* Up to 4 MiB (the default limit) the direct path takes the steady state's
 * collectives too: a 128 KiB all-reduce and a 512 KiB (2 tasks) or 1 MiB
 * (4 tasks) all-gather, with exact results; with the limit at 64 KiB none
 * of them. */
static void test_large_runs_direct_up_to_the_limit(void **state) {
  if (!once) {
    skip(); /* no agreed collectives: nothing runs on the direct path */
    return;
  }
  rf__mpi_direct_force(1);
  job_graph m;
  build(&m);
  rf_session *s = mt_session(m.g, 2, 30000);
  const int64_t n = 16384;      /* float64s a device */
  assert_ok(step(&m, s, 0, n)); /* agreed through task 0 */
  int k = 1;
  for (int pass = 0; pass < 2; pass++) {
    rf__mpi_direct_max_force(pass ? 65536 : -1); /* -1: the default */
    int64_t taken = rf__mpi_direct_taken();
    for (int i = 0; i < 3; i++) assert_ok(step(&m, s, k++, n));
    assert_int_equal(rf__mpi_direct_taken() - taken, pass ? 0 : 2 * 3);
  }
  rf_session_free(s);
  rf_graph_free(m.g);
  rf__mpi_direct_force(-1);
  rf__mpi_direct_max_force(-1);
}

int main(void) {
  if (mt_init()) return 1;
  const char *env = getenv("RF_MPI_AGREE_ONCE");
  once = !(env && strcmp(env, "0") == 0);
  if (T == 0) printf("agree-once %s\n", once ? "on" : "off");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steady_state_sends_no_message),
      cmocka_unit_test(test_every_kind_steady),
      cmocka_unit_test(test_shape_change_everywhere_falls_back),
      cmocka_unit_test(test_shape_changing_every_step),
      cmocka_unit_test(test_late_change_in_one_task_is_named),
      cmocka_unit_test(test_task_skipping_a_late_step_is_named),
      cmocka_unit_test(test_task_skipping_and_going_on_is_blamed),
      cmocka_unit_test(test_steady_state_runs_direct),
      cmocka_unit_test(test_late_task_hands_back),
      cmocka_unit_test(test_data_go_with_the_check),
      cmocka_unit_test(test_large_runs_direct_up_to_the_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
