/* tests/mpi/test_mpi_faults.c - collectives across processes that go wrong
 * (run under mpirun: tests/mpi/mpirun.sh), each an error in every process,
 * never a hang, and the session works again afterwards:
 *  - tasks feed different shapes: every process fails naming 'shape', both
 *    values and a device of each side (with its task);
 *  - processes that built different graphs (float32 here, float64 there):
 *    every process fails naming 'dtype'; in dtype, reduction or the
 *    collective: the error names both values, nodes and devices;
 *  - a task skips the step: the others fail within the collective timeout
 *    (and task 0's 1 s probe) naming the missing task and its devices, and
 *    that it answered (alive, not at the collective);
 *  - a kernel fails on task 1 before its collective: the others fail at
 *    once (not at the timeout) with task 1's error;
 *  - a task comes late to a session: every process's rf_session_new fails
 *    (the late one's naming task 0, which gave up), twice (the others'
 *    second one gave up waiting behind the first), and the next session
 *    works in every process (sessions stay paired);
 *  - last, a task leaves (frees its session and exits; task NT-1, or the one
 *    in RF_TEST_EXIT_TASK: 0 is the coordinator): the others fail within the
 *    timeout, naming the task (task 0: that it left, freeing its session),
 *    and so does their next step. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_testutil.h"
#include "ringflow/collectives.h"

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* x[t][d] (float, rows unknown) on /task:t/cpu:d, d < 2, reshaped to (rows,
 * 4) and all-reduced; ys[t*2+d] the results. */
typedef struct job_graph {
  rf_graph *g;
  rf_output x[128], y[128];
} job_graph;

typedef enum { AR_SUM, AR_MAX, GATHER } coll_kind;

/* The collective's name ("ar"; a long one for test_long_name_mismatch). */
static const char *coll_name = "ar";

static void build_kind(job_graph *m, rf_dtype dt, coll_kind kind) {
  m->g = rf_graph_new();
  rf_output r[128];
  for (int i = 0; i < 2 * NT; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(i / 2, i % 2, dev, sizeof dev);
    assert_ok(rf_graph_push_device(m->g, dev));
    m->x[i] = rf_placeholder(m->g, NULL, dt, rf_shape_of(1, -1));
    int64_t dims[2] = {-1, 4};
    r[i] = rf_reshape_to(m->g, NULL, m->x[i], 2, dims);
    rf_graph_pop_device(m->g);
  }
  if (kind == GATHER)
    rf_all_gather_n(m->g, coll_name, r, 2 * NT, m->y);
  else
    rf_all_reduce_n(m->g, coll_name, r, 2 * NT,
                    kind == AR_MAX ? RF_REDUCE_MAX : RF_REDUCE_SUM, m->y);
  assert_graph_ok(m->g);
}

static void build(job_graph *m, rf_dtype dt) { build_kind(m, dt, AR_SUM); }

static rf_tensor *ones(rf_dtype dt, int64_t n) {
  rf_shape s = rf_shape_of(1, n);
  rf_tensor *t;
  assert_ok(rf_tensor_new(dt, &s, NULL, &t));
  for (int64_t i = 0; i < n; i++) rf_tensor_set(t, i, 1);
  return t;
}

/* This task's run with n elements fed to each of its devices (n0 to cpu:0);
 * on success both outputs must be 2*NT everywhere. */
static rf_status *step(job_graph *m, rf_session *s, rf_dtype dt, int64_t n0,
                       int64_t n) {
  rf_tensor *a = ones(dt, n0), *b = ones(dt, n), *out[2] = {0};
  rf_feed feeds[2] = {{m->x[2 * T], a}, {m->x[2 * T + 1], b}};
  rf_status *st = rf_session_run(s, feeds, 2, &m->y[2 * T], 2, NULL, 0, out);
  for (int k = 0; !st && k < 2; k++) {
    for (int64_t i = 0; i < rf_tensor_num_elements(out[k]); i++)
      assert_true(rf_tensor_get(out[k], i) == 2 * NT);
    rf_tensor_release(out[k]);
  }
  rf_tensor_release(a);
  rf_tensor_release(b);
  return st;
}

static void test_mismatched_shapes(void **state) {
  job_graph m;
  build(&m, RF_FLOAT32);
  rf_session *s = mt_session(m.g, 2, 30000);
  assert_ok(step(&m, s, RF_FLOAT32, 8, 8));
  int64_t n = T == 1 ? 12 : 8; /* (3, 4) on task 1, (2, 4) elsewhere */
  double t0 = now_ms();
  rf_status *st = step(&m, s, RF_FLOAT32, n, n);
  const char *msg = rf_status_message(st);
  assert_contains(msg, "(2, 4) on /task:");
  assert_contains(msg, "(3, 4) on /task:1/cpu:0");
  assert_status(st, RF_INVALID_ARGUMENT, "participants disagree on shape");
  assert_true(now_ms() - t0 < 15000); /* at once, not at the timeout */
  assert_ok(step(&m, s, RF_FLOAT32, 4, 4));
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* A disagreement on a collective with a 5000-byte name: the error names the
 * field, both values and the tasks, with the name capped as quoted names
 * are (it was quoted whole and the message cut at 4 KiB, losing the rest). */
static void test_long_name_mismatch(void **state) {
  char *name = malloc(5001);
  assert_non_null(name);
  memset(name, 'c', 5000);
  name[5000] = '\0';
  coll_name = name;
  job_graph m;
  build(&m, RF_FLOAT32);
  coll_name = "ar";
  rf_session *s = mt_session(m.g, 2, 30000);
  assert_ok(step(&m, s, RF_FLOAT32, 8, 8));
  int64_t n = T == 1 ? 12 : 8;
  rf_status *st = step(&m, s, RF_FLOAT32, n, n);
  const char *msg = rf_status_message(st);
  assert_contains(msg, "... (5000 bytes)' (job step");
  assert_contains(msg, "participants disagree on shape");
  assert_contains(msg, "(3, 4) on /task:1/cpu:0");
  assert_true(strlen(msg) < 4096);
  rf_status_free(st);
  assert_ok(step(&m, s, RF_FLOAT32, 4, 4));
  rf_session_free(s);
  rf_graph_free(m.g);
  free(name);
}

static void test_different_graphs(void **state) {
  rf_dtype dt = T == 1 ? RF_FLOAT64 : RF_FLOAT32;
  job_graph m;
  build(&m, dt);
  rf_session *s = mt_session(m.g, 2, 30000);
  rf_status *st = step(&m, s, dt, 4, 4);
  assert_contains(rf_status_message(st), "float64 on /task:1/cpu:0");
  assert_status(st, RF_INVALID_ARGUMENT, "participants disagree on dtype");
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* Task 1 built a graph that differs in one field: every process's error
 * names the field, both values, and a node and device of each side (task 1
 * and one other task, whichever the coordinator compared first). */
static void test_disagreements_name_both_sides(void **state) {
  static const struct {
    const char *field, *mine, *theirs;
    rf_dtype dt;
    coll_kind kind;
  } cases[] = {
      {"dtype", "float32", "float64", RF_FLOAT64, AR_SUM},
      {"reduction", "sum", "max", RF_FLOAT32, AR_MAX},
      {"the collective", "all_reduce", "all_gather", RF_FLOAT32, GATHER},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    job_graph m;
    build_kind(&m, T == 1 ? cases[c].dt : RF_FLOAT32,
               T == 1 ? cases[c].kind : AR_SUM);
    rf_session *s = mt_session(m.g, 2, 30000);
    rf_status *st = step(&m, s, T == 1 ? cases[c].dt : RF_FLOAT32, 4, 4);
    assert_non_null(st);
    const char *msg = rf_status_message(st);
    char want[160];
    snprintf(want, sizeof want,
             "participants disagree on %s: ", cases[c].field);
    assert_contains(msg, want);
    snprintf(want, sizeof want, "%s on /task:1/cpu:0 (node 'ar_2')",
             cases[c].theirs);
    assert_contains(msg, want);
    bool other = false;
    for (int t = 0; t < NT && !other; t++) {
      snprintf(want, sizeof want, "%s on /task:%d/cpu:0 (node 'ar_%d')",
               cases[c].mine, t, 2 * t);
      other = t != 1 && strstr(msg, want);
    }
    if (!other) fail_msg("no other task's side in: %s", msg);
    assert_status(st, RF_INVALID_ARGUMENT, NULL);
    rf_session_free(s);
    rf_graph_free(m.g);
  }
}

/* The processes' graphs put a reduce's or broadcast's root on different
 * tasks: two tasks hold it (task 1's graph on task 1, the others' on task
 * 0), none does (task 0's graph on task 1, the others' on task 0), or, with
 * three tasks or more, one does and another's graph puts it on a third
 * (task 1's graph on task 2, the others' on task 0: that one went unnoticed,
 * task 1 receiving task 0's value). Every process fails at once naming the
 * root on both sides with their devices and nodes (it said only "needs
 * exactly one root ..., found 2"). */
static void test_roots_disagree(void **state) {
  for (int c = 0; c < 6; c++) {
    bool reduce = c % 2 == 0;
    int how = c / 2; /* 0: two roots, 1: none, 2: on a third task */
    if (how == 2 && NT < 3) continue;
    int root = how == 0   ? (T == 1 ? 1 : 0)
               : how == 1 ? (T == 0 ? 1 : 0)
                          : (T == 1 ? 2 : 0);
    rf_graph *g = rf_graph_new();
    rf_output x[64], y[64];
    for (int t = 0; t < NT; t++) {
      char dev[MT_DEVICE_LEN];
      mt_device(t, 0, dev, sizeof dev);
      assert_ok(rf_graph_push_device(g, dev));
      x[t] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(1, 4));
      rf_graph_pop_device(g);
    }
    rf_output fetch = x[T];
    rf_node *target = NULL;
    if (reduce) {
      char dev[MT_DEVICE_LEN];
      mt_device(root, 0, dev, sizeof dev);
      assert_ok(rf_graph_push_device(g, dev));
      rf_output r = rf_reduce(g, "rt", x, NT, RF_REDUCE_SUM);
      rf_graph_pop_device(g);
      if (T == root)
        fetch = r;
      else
        target = r.node;
    } else {
      rf_output b = rf_broadcast(g, "rt", x[root]);
      for (int t = 0; t < NT; t++) {
        char dev[MT_DEVICE_LEN];
        mt_device(t, 0, dev, sizeof dev);
        assert_ok(rf_graph_push_device(g, dev));
        y[t] = rf_identity(g, NULL, b);
        rf_graph_pop_device(g);
      }
      fetch = y[T];
    }
    assert_graph_ok(g);
    rf_session *s = mt_session(g, 1, 30000);
    rf_tensor *a = ones(RF_FLOAT32, 4), *out = NULL;
    rf_feed feed = {x[T], a};
    double t0 = now_ms();
    rf_status *st = rf_session_run(
        s, &feed, 1, &fetch, 1, target ? &target : NULL, target ? 1 : 0, &out);
    assert_true(now_ms() - t0 < 15000); /* at once, not at the timeout */
    assert_non_null(st);
    const char *msg = rf_status_message(st);
    char want[256];
    snprintf(want, sizeof want, "participants disagree on the root (the %s): ",
             reduce ? "receiver" : "sender");
    assert_contains(msg, want);
    /* the two places, each as a task's graph has it */
    assert_contains(msg, "/task:0/cpu:0 on /task:");
    snprintf(want, sizeof want, "/task:%d/cpu:0 on /task:", how == 2 ? 2 : 1);
    assert_contains(msg, want);
    assert_status(st, RF_INVALID_ARGUMENT, NULL);
    rf_tensor_release(out);
    rf_tensor_release(a);
    rf_session_free(s);
    rf_graph_free(g);
  }
}

static void test_task_skips_the_step(void **state) {
  job_graph m;
  build(&m, RF_FLOAT32);
  rf_session *s = mt_session(m.g, 2, 2000);
  int skip = NT - 1;
  if (T == skip) { /* a step of its own, without the all-reduce */
    rf_tensor *a = ones(RF_FLOAT32, 4), *out;
    rf_feed feed = {m.x[2 * T], a};
    assert_ok(rf_session_run(s, &feed, 1, &m.x[2 * T], 1, NULL, 0, &out));
    rf_tensor_release(out);
    rf_tensor_release(a);
    /* until the others have given up on this step (the next one's deadline
     * runs from the first task there): the timeout and task 0's 1 s probe */
    struct timespec ts = {3, 500000000};
    nanosleep(&ts, NULL);
  } else {
    double t0 = now_ms();
    rf_status *st = step(&m, s, RF_FLOAT32, 4, 4);
    char want[128];
    snprintf(want, sizeof want,
             "waiting for task %d (/task:%d/cpu:0, /task:%d/cpu:1)", skip, skip,
             skip);
    assert_contains(rf_status_message(st), "2 of");
    /* alive (its communication thread answered task 0's PING), not dead */
    snprintf(want, sizeof want,
             "(task %d answers: it has not reached this collective", skip);
    assert_contains(rf_status_message(st), want);
    snprintf(want, sizeof want,
             "waiting for task %d (/task:%d/cpu:0, /task:%d/cpu:1)", skip, skip,
             skip);
    assert_status(st, RF_DEADLINE_EXCEEDED, want);
    assert_true(now_ms() - t0 < 15000);
  }
  assert_ok(step(&m, s, RF_FLOAT32, 4, 4)); /* everyone again */
  rf_session_free(s);
  rf_graph_free(m.g);
}

static void test_kernel_fails_on_one_task(void **state) {
  job_graph m;
  build(&m, RF_FLOAT32);
  rf_session *s = mt_session(m.g, 2, 60000);
  double t0 = now_ms();
  /* task 1's cpu:0 gets 5 elements: its Reshape to (-1, 4) fails */
  rf_status *st = step(&m, s, RF_FLOAT32, T == 1 ? 5 : 4, 4);
  if (T == 1) {
    assert_status(st, RF_INVALID_ARGUMENT, "/task:1/cpu:0");
  } else {
    /* "failed on task 1" (its collective) or "task 1 failed that step" */
    assert_contains(rf_status_message(st), "task 1");
    assert_contains(rf_status_message(st), "(Reshape) on /task:1/cpu:0");
    assert_status(st, RF_INVALID_ARGUMENT, "cannot reshape");
  }
  assert_true(now_ms() - t0 < 30000); /* the timeout is 60 s */
  assert_ok(step(&m, s, RF_FLOAT32, 4, 4));
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* The last task comes 3 s late to a session whose timeout is 0.5 s: the
 * others' rf_session_new fails at their timeout (DEADLINE_EXCEEDED, "not
 * every process"), and so does their next one, which waits for the late
 * task to come to the first ("came to an earlier session"); their engines
 * finish the given-up set-up in the background, so the late one's fails
 * at once, naming task 0, which gave up ("task 0 gave up"), and so does its
 * second (the others' second, given up before its duplicates were issued,
 * issues them in its turn and gives up in the exchange), and MPI stays
 * matched: the next session, with a
 * timeout that covers the wait, works everywhere. (Before session 16 MPI
 * wrote the late duplicates into the freed sessions, no later session
 * could be made, and MPI_Finalize crashed.) */
static void test_late_session(void **state) {
  job_graph m;
  build(&m, RF_FLOAT32);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  o.collective_timeout_ms = 500;
  int late = NT - 1;
  if (T == late) {
    struct timespec ts = {3, 0};
    nanosleep(&ts, NULL);
  }
  rf_session *s = NULL;
  double t0 = now_ms();
  rf_status *st = rf_session_new(m.g, &o, &s);
  assert_null(s);
  if (T == late)
    assert_status(st, RF_DEADLINE_EXCEEDED,
                  "task 0 gave up on this session before this process made "
                  "it (its collective timeout passed first;");
  else
    assert_status(st, RF_DEADLINE_EXCEEDED,
                  "not every process of the job made this session within 500 "
                  "ms (every process must make the same sessions in the same "
                  "order)");
  assert_true(now_ms() - t0 < 10000);
  /* The second session: the others wait behind the first for their own
   * 0.5 s and give up; it still takes its round once the late task comes
   * (before, it did not, and the late task's second session met the
   * others' third: every later session was paired off by one). */
  if (T != late)
    assert_status(rf_session_new(m.g, &o, &s), RF_DEADLINE_EXCEEDED,
                  "not every process of the job came to an earlier session "
                  "that this process gave up on, within this session's 500 "
                  "ms");
  else
    assert_status(rf_session_new(m.g, &o, &s), RF_DEADLINE_EXCEEDED,
                  "task 0 gave up on this session before this process made "
                  "it");
  assert_null(s);
  s = mt_session(m.g, 2, 20000); /* all of them now */
  assert_ok(step(&m, s, RF_FLOAT32, 4, 4));
  rf_session_free(s);
  rf_graph_free(m.g);
}

static void test_task_exits(void **state) {
  const char *env = getenv("RF_TEST_EXIT_TASK");
  int gone = env ? atoi(env) : NT - 1;
  job_graph m;
  build(&m, RF_FLOAT32);
  rf_session *s = mt_session(m.g, 2, 1000);
  assert_ok(step(&m, s, RF_FLOAT32, 4, 4));
  if (T != gone) {
    double t0 = now_ms();
    rf_status *st = step(&m, s, RF_FLOAT32, 4, 4);
    /* The task that left is named among those waited for; under load a
     * live task can miss the 1 s timeout too and be named beside it. */
    char want[64];
    snprintf(want, sizeof want, gone ? "task %d (/task:%d/" : "task %d", gone,
             gone);
    if (gone) assert_contains(rf_status_message(st), "waiting for task");
    /* Task 0 was told it freed its session (BYE): not "died or stopped" */
    char left[96];
    snprintf(left, sizeof left,
             "task %d left before reaching it: it freed its session or "
             "exited",
             gone);
    if (T == 0) assert_contains(rf_status_message(st), left);
    assert_status(st, RF_DEADLINE_EXCEEDED, want);
    assert_true(now_ms() - t0 < 15000);
    /* A later step fails too (the agreed collective's check of the step
     * before never finishes), and names the task that left as the first
     * failure did, not only "an earlier step's collective of that name
     * has not finished". */
    for (int k = 0; k < 1; k++) {
      t0 = now_ms();
      st = step(&m, s, RF_FLOAT32, 4, 4);
      assert_non_null(st);
      if (!strstr(rf_status_message(st), want))
        fail_msg("task %d, step %d after: '%s' is not in: %s", T, k + 1, want,
                 rf_status_message(st));
      rf_status_free(st);
      assert_true(now_ms() - t0 < 15000);
    }
  }
  rf_session_free(s); /* the leaving task goes on to exit */
  rf_graph_free(m.g);
  if (T == gone) { /* ... once the others are near their exit (the engine
                    * finalises MPI only if every process exits within 3 s
                    * of the first, once a peer may be dead) */
    struct timespec ts = {4, 0};
    nanosleep(&ts, NULL);
  }
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mismatched_shapes),
      cmocka_unit_test(test_long_name_mismatch),
      cmocka_unit_test(test_different_graphs),
      cmocka_unit_test(test_disagreements_name_both_sides),
      cmocka_unit_test(test_roots_disagree),
      cmocka_unit_test(test_task_skips_the_step),
      cmocka_unit_test(test_kernel_fails_on_one_task),
      cmocka_unit_test(test_late_session),
      cmocka_unit_test(test_task_exits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
