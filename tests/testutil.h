/* tests/testutil.h - shared helpers for the cmocka tests: seeded random data,
 * checks against float64 references, one-shot session runs. Every test prints
 * its seed; RF_TEST_SEED=<n> reproduces a run. */
#ifndef RF_TESTS_TESTUTIL_H
#define RF_TESTS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the three above first. */
#include <cmocka.h>

#include "ringflow/ringflow.h"

/* Fails the test with the status's code and message when st is an error. */
#define assert_ok(st) rf_test_assert_ok((st), __FILE__, __LINE__)
void rf_test_assert_ok(rf_status *st, const char *file, int line);
/* Asserts st has `code` (and, if sub != NULL, that its message contains sub);
 * frees st. */
#define assert_status(st, code, sub) \
  rf_test_assert_status((st), (code), (sub), __FILE__, __LINE__)
void rf_test_assert_status(rf_status *st, rf_code code, const char *sub,
                           const char *file, int line);
/* Asserts the graph holds no error. */
#define assert_graph_ok(g) assert_ok(rf_graph_status(g))

/* The run's seed (RF_TEST_SEED or the clock), printed once. */
uint64_t rf_test_seed(void);
/* A generator state of its own for one test: the run's seed mixed with
 * salt (never 0). */
uint64_t rf_test_rng(uint64_t salt);
/* xorshift64* step; state must be non-zero. */
uint64_t rf_test_rand(uint64_t *state);
/* Uniform in [lo, hi). */
double rf_test_uniform(uint64_t *state, double lo, double hi);

/* A tensor of dtype/shape with uniform values in [lo, hi), rounded for
 * integer dtypes (bool: 0/1). */
rf_tensor *rf_test_random_tensor(uint64_t *rng, rf_dtype dtype, rf_shape shape,
                                 double lo, double hi);
/* Elements as doubles (malloc'ed; free with free()). */
double *rf_test_to_doubles(const rf_tensor *t);

/* A tolerance fit for dtype: 0 for integers, ~eps*32 relative for floats. */
double rf_test_tolerance(rf_dtype dtype);
/* Asserts t has `shape` and each element is within atol + rtol*|want| of
 * want[i]; on failure prints the first bad index. */
#define assert_tensor_near(t, shape, want, tol) \
  rf_test_assert_near((t), (shape), (want), (tol), __FILE__, __LINE__)
void rf_test_assert_near(const rf_tensor *t, rf_shape shape, const double *want,
                         double tol, const char *file, int line);

/* Asserts got has want's dtype and shape and the same bytes (the same
 * bits for floats, NaNs included). */
#define assert_same_bytes(got, want) \
  rf_test_assert_same_bytes((got), (want), __FILE__, __LINE__)
void rf_test_assert_same_bytes(const rf_tensor *got, const rf_tensor *want,
                               const char *file, int line);

/* A session of num_cpu_devices CPU devices (default options otherwise) on g,
 * which must hold no error; fails the test when it cannot be made. */
rf_session *rf_test_cpu_session(const rf_graph *g, int num_cpu_devices);

/* A session of num_cpu_devices CPU devices whose pool has num_threads
 * threads (0: one per core), default options otherwise; g must hold no
 * error; fails the test when it cannot be made. */
rf_session *rf_test_threads_session(const rf_graph *g, int num_cpu_devices,
                                    int num_threads);

/* Makes a session (num_cpu_devices devices), runs once fetching n outputs,
 * frees the session. outs receive new references. */
void rf_test_run(rf_graph *g, int num_cpu_devices, const rf_feed *feeds,
                 int nfeeds, const rf_output *fetches, int n, rf_tensor **outs);

/* The same on a session with default options, returning the status of
 * making the session or of the run instead of asserting it (for tests of
 * errors). */
rf_status *rf_test_try_run(rf_graph *g, const rf_feed *feeds, int nfeeds,
                           const rf_output *fetches, int n, rf_tensor **outs);

/* Runs node's kernel alone (rf__kernel_run_single) with the k-th
 * allocation failing, for k = 1, 2, ... until it succeeds: every failure must
 * be RESOURCE_EXHAUSTED, leave no output and leak nothing (the allocator's
 * cache is trimmed before counting), and at least one must happen. in is
 * borrowed; the outputs of the final run are released. */
void rf_test_kernel_under_faults(const rf_node *node, rf_tensor *const *in);

/* Skips the calling test unless a session can have a GPU device (a CUDA
 * build, a GPU, a driver); the first call prints "GPU tests skipped:
 * <reason>" when it cannot. */
void rf_test_need_gpu(void);

/* Milliseconds on the monotonic clock. */
double rf_test_now_ms(void);

/* Runs fetches (at most 16) expecting an error of `code` whose message holds
 * every string of subs, and no output; returns the elapsed milliseconds. */
double rf_test_expect_run_error(rf_session *s, const rf_feed *feeds, int nfeeds,
                                const rf_output *fetches, int nfetches,
                                rf_code code, const char *const *subs,
                                int nsubs);

#endif
