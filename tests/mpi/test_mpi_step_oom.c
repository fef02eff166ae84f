/* tests/mpi/test_mpi_step_oom.c - a step that fails for want of memory in
 * one process of an MPI job (run under mpirun: tests/mpi/mpirun.sh) before
 * any of its kernels ran (its executor's frames) must fail that step's
 * collectives in the other processes at once, with its error, as a kernel's
 * error does - not after the collective timeout (60 s here).
 *
 * Task 1 has 9 devices, so a step of a compiled plan allocates its frame
 * list (8 fit in place); it fails its k-th allocation of a step for k = 1, 2,
 * ... until the step succeeds, and tells the others after each attempt
 * whether it failed in the executor. Every task's next step must work.
 *
 * Through task 0 every step (RF_MPI_AGREE_ONCE=0, set below): on the
 * agree-once path a step that task 1 fails before its collective starts
 * (rf__job_step_failed) is not yet seen by the others, who time out and
 * then find the collective still busy in every later step. */
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
    int seen = !st ? 0 : strstr(rf_status_message(st), "executor") ? 2 : 1;
    MPI_Bcast(&seen, 1, MPI_INT, VICTIM, MPI_COMM_WORLD);
    if (seen == 2) {
      executor_failures++;
      char want[64];
      snprintf(want, sizeof want, "/task:%d/cpu:", VICTIM);
      assert_non_null(st);
      assert_contains(rf_status_message(st), want);
      assert_true(ms < TIMEOUT_MS / 2); /* told, not timed out */
      assert_status(st, RF_RESOURCE_EXHAUSTED, "executor");
    } else {
      rf_status_free(st);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (seen == 0) break;
  }
  assert_true(executor_failures > 0);
  assert_ok(step(&j, s));
  rf_tensor_release(j.ones);
  rf_session_free(s);
  rf_graph_free(j.g);
}

int main(void) {
  setenv("RF_MPI_AGREE_ONCE", "0", 1); /* see the top of the file */
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_executor_oom_fails_the_job_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
