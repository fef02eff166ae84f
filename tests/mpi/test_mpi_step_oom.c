/* tests/mpi/test_mpi_step_oom.c - a step that fails for want of memory in
 * one process of an MPI job (run under mpirun: tests/mpi/mpirun.sh) before
 * any of its kernels ran (its executor's frames) must fail that step's
 * collectives in the other processes at once, with its error, as a kernel's
 * error does - not after the collective timeout (60 s here).
 *
 * Task 1 has 9 devices, so a step of a compiled plan allocates its frame
 * list (8 fit in place); it fails its k-th allocation of a step for k = 1, 2,
 * ... until the step succeeds (after one failure in the executor), and
 * tells the others after each attempt whether and how it failed. Whenever
 * it failed, the others must end that step within half the timeout, with
 * success or an error naming task 1 and its error; every task's next step
 * must work.
 *
 * Both paths: the steady state (agreed once, the default: the others wait
 * in the check, with no coordinator to fail it) and, run again by CMake
 * with RF_MPI_AGREE_ONCE=0, the READY/GO round trip of every step. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_testutil.h"
#include "ringflow/collectives.h"
#include "ringflow/debug.h"

#define NDEV 9
#define VICTIM 1
#define TIMEOUT_MS 60000

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct job {
  rf_graph *g;
  rf_output x[NDEV * 4], sum[NDEV * 4];
  rf_tensor *ones;
} job;

/* x on /task:t/cpu:d ([4] float64), all-reduced over every device. */
static void build(job *j) {
  j->g = rf_graph_new();
  for (int i = 0; i < NDEV * NT; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(i / NDEV, i % NDEV, dev, sizeof dev);
    assert_ok(rf_graph_push_device(j->g, dev));
    j->x[i] = rf_placeholder(j->g, NULL, RF_FLOAT64, rf_shape_of(1, 4));
    rf_graph_pop_device(j->g);
  }
  rf_all_reduce_n(j->g, "sum", j->x, NDEV * NT, RF_REDUCE_SUM, j->sum);
  assert_graph_ok(j->g);
  rf_shape s = rf_shape_of(1, 4);
  assert_ok(rf_tensor_new(RF_FLOAT64, &s, NULL, &j->ones));
  for (int i = 0; i < 4; i++) rf_tensor_set(j->ones, i, 1);
}

/* This task's step; on success every sum is the device count. */
static rf_status *step(job *j, rf_session *s) {
  rf_feed feeds[NDEV];
  rf_tensor *out[NDEV] = {0};
  for (int d = 0; d < NDEV; d++)
    feeds[d] = (rf_feed){j->x[T * NDEV + d], j->ones};
  rf_status *st =
      rf_session_run(s, feeds, NDEV, &j->sum[T * NDEV], NDEV, NULL, 0, out);
  for (int d = 0; !st && d < NDEV; d++) {
    for (int i = 0; i < 4; i++)
      assert_true(rf_tensor_get(out[d], i) == NDEV * NT);
    rf_tensor_release(out[d]);
  }
  return st;
}

static void test_executor_oom_fails_the_job_step(void **state) {
  job j;
  build(&j);
  rf_session *s = mt_session(j.g, NDEV, TIMEOUT_MS);
  assert_ok(step(&j, s)); /* compiled, frames made */
  int executor_failures = 0;
  for (int64_t k = 1;; k++) {
    assert_true(k < 200);
    if (T == VICTIM) rf_debug_fail_allocation_once(k);
    double t0 = now_ms();
    rf_status *st = step(&j, s);
    double ms = now_ms() - t0;
    if (T == VICTIM) rf_debug_fail_allocation_once(0);
    /* what the victim saw: 0 success, 1 other failure, 2 the executor */
    fprintf(stderr, "T%d k=%lld %.0f ms: %.300s\n", T, (long long)k, ms,
            st ? rf_status_message(st) : "ok");
    int seen = !st ? 0 : strstr(rf_status_message(st), "executor") ? 2 : 1;
    MPI_Bcast(&seen, 1, MPI_INT, VICTIM, MPI_COMM_WORLD);
    /* The victim's error, after its last ": " (its own prefixes, such as
     * the node, are not in what the others are told). */
    char cause[160] = "";
    if (T == VICTIM && st) {
      const char *m = rf_status_message(st), *c = m;
      for (const char *p = strstr(m, ": "); p; p = strstr(p + 1, ": "))
        c = p + 2;
      snprintf(cause, sizeof cause, "%s", c);
    }
    MPI_Bcast(cause, sizeof cause, MPI_CHAR, VICTIM, MPI_COMM_WORLD);
    if (seen) assert_true(ms < TIMEOUT_MS / 2); /* told, not timed out */
    if (seen && st && T != VICTIM) { /* names the victim and its error */
      char want[64];
      snprintf(want, sizeof want, "task %d", VICTIM);
      assert_contains(rf_status_message(st), want);
      assert_contains(rf_status_message(st), cause);
    }
    if (seen == 2) {
      executor_failures++;
      char want[64];
      snprintf(want, sizeof want, "/task:%d/cpu:", VICTIM);
      assert_non_null(st);
      assert_contains(rf_status_message(st), want);
      assert_status(st, RF_RESOURCE_EXHAUSTED, "executor");
    } else {
      rf_status_free(st);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* Other threads allocate too (the communication thread agreeing the
     * collective anew after a failed step): a success can come before the
     * executor's allocation was hit, so go on until it was. */
    if (seen == 0 && executor_failures > 0) break;
  }
  assert_true(executor_failures > 0);
  assert_ok(step(&j, s));
  rf_tensor_release(j.ones);
  rf_session_free(s);
  rf_graph_free(j.g);
}

/* A failure told on (np4): task 1 fails a step before it starts (a feed of
 * the wrong shape); 'sum' spans tasks 0, 1 and 3, 'pair' tasks 0 and 2,
 * and task 0's part of 'pair' needs its 'sum'. Task 0, told by task 1,
 * fails 'sum' and never reaches 'pair', so it must tell task 2 in turn
 * (task 1, not in 'pair', does not): task 2, in 'pair' only, must end that
 * step within half the timeout naming task 0; the next step works. */
typedef struct pair_job {
  rf_output x[4], sum[3], pair[2];
} pair_job;

static rf_status *pair_step(rf_session *s, const pair_job *p, bool bad) {
  rf_shape sh = rf_shape_of(1, bad ? 3 : 4);
  rf_tensor *in = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &in));
  for (int i = 0; i < sh.dims[0]; i++) rf_tensor_set(in, i, T + 1);
  rf_feed feed = {p->x[T], in};
  rf_output fetch[2];
  int n = 0;
  if (T != 2) fetch[n++] = p->sum[T == 3 ? 2 : T];
  if (T == 0 || T == 2) fetch[n++] = p->pair[T == 0 ? 0 : 1];
  rf_tensor *out[2] = {0};
  rf_status *st = rf_session_run(s, &feed, 1, fetch, n, NULL, 0, out);
  for (int i = 0; !st && i < 4; i++) { /* sum 1 + 2 + 4, pair that + 3 */
    if (T != 2) assert_true(rf_tensor_get(out[0], i) == 7);
    if (T == 0 || T == 2) assert_true(rf_tensor_get(out[n - 1], i) == 10);
  }
  for (int f = 0; f < 2; f++) rf_tensor_release(out[f]);
  rf_tensor_release(in);
  return st;
}

static void test_told_on_to_a_subset(void **state) {
  if (NT != 4) skip();
  rf_graph *g = rf_graph_new();
  pair_job p;
  for (int t = 0; t < 4; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    p.x[t] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(1, 4));
    rf_graph_pop_device(g);
  }
  rf_output in[3] = {p.x[0], p.x[1], p.x[3]};
  rf_all_reduce_n(g, "sum", in, 3, RF_REDUCE_SUM, p.sum);
  rf_output two[2] = {p.sum[0], p.x[2]}; /* task 0's part waits for sum */
  rf_all_reduce_n(g, "pair", two, 2, RF_REDUCE_SUM, p.pair);
  assert_graph_ok(g);
  rf_session *s = mt_session(g, 1, TIMEOUT_MS);
  for (int k = 0; k < 2; k++) assert_ok(pair_step(s, &p, false));
  double t0 = now_ms();
  rf_status *st = pair_step(s, &p, T == VICTIM);
  double ms = now_ms() - t0;
  assert_non_null(st);
  assert_true(ms < TIMEOUT_MS / 2); /* told, not timed out */
  if (T == 2) assert_contains(rf_status_message(st), "task 0");
  if (T == 0 || T == 3) assert_contains(rf_status_message(st), "task 1");
  rf_status_free(st);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < 2; k++) assert_ok(pair_step(s, &p, false));
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_executor_oom_fails_the_job_step),
      cmocka_unit_test(test_told_on_to_a_subset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
