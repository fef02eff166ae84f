/* tests/mpi/test_mpi_fault_injection.c - allocation failures (both modes of
 * ringflow/debug.h) in one process of an MPI job (run under mpirun:
 * tests/mpi/mpirun.sh). The last task (or RF_TEST_INJECT_TASK) fails its
 * k-th allocation while every
 * task runs a step of a whole-job all-reduce and all-gather (2 devices a
 * task). Every process must end each attempt with success (right values)
 * or an error - never crash or hang: the failing task with
 * RESOURCE_EXHAUSTED, the others with that task's error or, when the failing
 * task could not tell them (its report needs memory too: always so in the
 * persistent mode), DEADLINE_EXCEEDED after the collective timeout (1 s
 * here; RF_TEST_TIMEOUT_MS sets another: the sanitizer builds take 3 s, so
 * that a task slowed by the sanitizer and the tests beside it is not taken
 * for a failed one in the steps that must succeed). Then, after an MPI barrier,
 * a clean step must succeed in every process. Leaks: live allocations are equal
 * before the session and after it is freed (per attempt the counts differ
 * between processes; ASan's LeakSanitizer also checks at exit).
 *
 * RF_TEST_INJECT_TASK=0 (ctest: test_mpi_fault_injection_coordinator):
 * failures in the job's coordinator, which must fail the collective at once
 * (RESOURCE_EXHAUSTED on task 0, never DEADLINE_EXCEEDED) and never send GO
 * to only some tasks (the next step would find the session broken).
 *
 * Not swept: rf_session_new. A process whose rf_session_new fails before
 * the job's attach leaves the others' attach pending: they fail with
 * DEADLINE_EXCEEDED and MPI may be unusable afterwards (docs/MULTIPROCESS.md).
 *
 * Run time: k takes every value up to 16, then a stride that keeps the
 * sweep to about 8 more attempts; an attempt that waits out the timeout
 * costs 1 s. RF_TEST_FULL_SWEEP=1: every k. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "fault_sweep.h"
#include "mpi_testutil.h"
#include "ringflow/collectives.h"

/* The collective timeout: 1 s unless RF_TEST_TIMEOUT_MS says otherwise. */
static int64_t timeout_ms(void) {
  const char *env = getenv("RF_TEST_TIMEOUT_MS");
  long long v = env ? atoll(env) : 0;
  return v > 0 ? (int64_t)v : 1000;
}
#define TIMEOUT_MS timeout_ms()

typedef struct job {
  rf_graph *g;
  rf_output x[128], sum[128], all[128];
  rf_tensor *in[128];
  double want_sum[4];
  rf_session *s;
} job;

static void build(job *j) {
  uint64_t rng = rf_test_seed();
  j->g = rf_graph_new();
  int n = 2 * NT;
  for (int i = 0; i < n; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(i / 2, i % 2, dev, sizeof dev);
    assert_ok(rf_graph_push_device(j->g, dev));
    j->x[i] = rf_placeholder(j->g, NULL, RF_FLOAT64, rf_shape_of(1, 4));
    rf_graph_pop_device(j->g);
    j->in[i] =
        rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, 4), -1, 1);
  }
  rf_all_reduce_n(j->g, "sum", j->x, n, RF_REDUCE_SUM, j->sum);
  rf_all_gather_n(j->g, "all", j->x, n, j->all);
  assert_graph_ok(j->g);
  for (int e = 0; e < 4; e++) {
    j->want_sum[e] = 0;
    for (int i = 0; i < n; i++) j->want_sum[e] += rf_tensor_get(j->in[i], e);
  }
}

static rf_status *new_session(job *j, rf_session **s) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  o.collective_timeout_ms = TIMEOUT_MS;
  return rf_session_new(j->g, &o, s);
}

/* This task's step: feeds its two inputs, fetches its all-reduce and
 * all-gather results; on success checks them. */
static rf_status *step(job *j, rf_session *s) {
  rf_feed feeds[2] = {{j->x[2 * T], j->in[2 * T]},
                      {j->x[2 * T + 1], j->in[2 * T + 1]}};
  rf_output f[4] = {j->sum[2 * T], j->sum[2 * T + 1], j->all[2 * T],
                    j->all[2 * T + 1]};
  rf_tensor *out[4] = {NULL};
  rf_status *st = rf_session_run(s, feeds, 2, f, 4, NULL, 0, out);
  for (int k = 0; !st && k < 2; k++)
    for (int e = 0; e < 4; e++)
      if (!(fabs(rf_tensor_get(out[k], e) - j->want_sum[e]) < 1e-12))
        fail_msg("task %d: sum[%d] %.17g, want %.17g", T, e,
                 rf_tensor_get(out[k], e), j->want_sum[e]);
  for (int k = 2; !st && k < 4; k++)
    for (int i = 0; i < 2 * NT; i++)
      for (int e = 0; e < 4; e++)
        if (rf_tensor_get(out[k], i * 4 + e) != rf_tensor_get(j->in[i], e))
          fail_msg("task %d: gathered [%d][%d] wrong", T, i, e);
  for (int k = 0; k < 4; k++) rf_tensor_release(out[k]);
  return st;
}

/* The code an attempt may end in: the failing task's own, or what the
 * others see of it. */
static void check_code(const rf_status *st, int inj, const char *what,
                       fs_mode mode, int64_t k) {
  rf_code c = rf_status_code(st);
  bool ok = c == RF_OK || c == RF_RESOURCE_EXHAUSTED ||
            (T != inj && c == RF_DEADLINE_EXCEEDED);
  if (!ok)
    fail_msg("task %d, %s, %s k=%lld: %s: %s", T, what, fs_mode_names[mode],
             (long long)k, rf_code_name(c), rf_status_message(st));
  /* A collective's error names a device (where it failed): never a bare
   * "out of memory", here or as another task's error. (Persistent failures
   * leave no memory to write the names: there the bare message is all.) */
  const char *m = rf_status_message(st);
  if (mode == FS_ONCE && c != RF_OK && strstr(m, "collective '") &&
      !strstr(m, "/task:"))
    fail_msg("task %d, %s, %s k=%lld: %s names no device: %s", T, what,
             fs_mode_names[mode], (long long)k, rf_code_name(c), m);
}

typedef rf_status *(*job_attempt)(job *j);

static rf_status *step_attempt(job *j) { return step(j, j->s); }

/* Sweeps k on task inj; every task takes part in every attempt. */
static void sweep(job *j, const char *what, job_attempt attempt, fs_mode mode,
                  int64_t first_n, int64_t max_attempts) {
  const char *env = getenv("RF_TEST_INJECT_TASK");
  int inj = env ? atoi(env) : NT - 1;
  int64_t c0 = rf_debug_allocation_count();
  MPI_Barrier(MPI_COMM_WORLD);
  assert_ok(attempt(j));
  long long total = (long long)(rf_debug_allocation_count() - c0);
  MPI_Bcast(&total, 1, MPI_LONG_LONG, inj, MPI_COMM_WORLD);
  int64_t stride = 1;
  const char *full = getenv("RF_TEST_FULL_SWEEP");
  if (!(full && *full && *full != '0') && total > first_n)
    stride = (total - first_n) / max_attempts + 1;
  int attempts = 0, failures = 0, timeouts = 0;
  const char *only = getenv("RF_TEST_K"); /* only k = n */
  for (int64_t k = only ? atoll(only) : 1;; k += k < first_n ? 1 : stride) {
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t count = rf_debug_allocation_count();
    if (T == inj && getenv("RF_TEST_VERBOSE"))
      fprintf(stderr, "%s %s k=%lld\n", what, fs_mode_names[mode],
              (long long)k);
    if (T == inj) fs_arm(mode, k);
    double t0 = rf_test_now_ms();
    rf_status *st = attempt(j);
    rf_debug_fail_allocation_after(0);
    double dt = rf_test_now_ms() - t0;
    int reached = T == inj && rf_debug_allocation_count() - count >= k;
    check_code(st, inj, what, mode, k);
    if (dt > TIMEOUT_MS * 3 + 5000)
      fail_msg("task %d, %s k=%lld: %.0f ms", T, what, (long long)k, dt);
    attempts++;
    failures += rf_status_code(st) == RF_RESOURCE_EXHAUSTED;
    timeouts += rf_status_code(st) == RF_DEADLINE_EXCEEDED;
    rf_status_free(st);
    /* everyone has ended the attempt: a clean step must work everywhere */
    MPI_Barrier(MPI_COMM_WORLD);
    assert_ok(step(j, j->s));
    MPI_Bcast(&reached, 1, MPI_INT, inj, MPI_COMM_WORLD);
    if (!reached || only) break;
  }
  fprintf(stderr,
          "task %d: %s, %s failures on task %d: %d attempts (stride %lld "
          "after %lld, %lld allocations): %d RESOURCE_EXHAUSTED, %d "
          "DEADLINE_EXCEEDED\n",
          T, what, fs_mode_names[mode], inj, attempts, (long long)stride,
          (long long)first_n, total, failures, timeouts);
}

static void test_injection_in_one_task(void **state) {
  job j;
  build(&j);
  /* MPI's engine starts with the first session and lives until exit */
  assert_ok(new_session(&j, &j.s));
  rf_session_free(j.s);
  rf_default_allocator_trim();
  int64_t live = rf_debug_live_allocations();
  assert_ok(new_session(&j, &j.s));
  assert_ok(step(&j, j.s));
  for (int m = 0; m < 2; m++) {
    sweep(&j, "job steps", step_attempt, (fs_mode)m, 16, 8);
  }
  rf_session_free(j.s);
  rf_default_allocator_trim();
  int64_t leaked = rf_debug_live_allocations() - live;
  if (leaked)
    fail_msg("task %d: %lld allocations leaked", T, (long long)leaked);
  for (int i = 0; i < 2 * NT; i++) rf_tensor_release(j.in[i]);
  rf_graph_free(j.g);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_injection_in_one_task),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
