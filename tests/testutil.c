/* tests/testutil.c - see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernel.h"
#include "ringflow/debug.h"

void rf_test_assert_ok(rf_status *st, const char *file, int line) {
  if (!st) return;
  fprintf(stderr, "%s:%d: unexpected error %s: %s\n", file, line,
          rf_code_name(rf_status_code(st)), rf_status_message(st));
  rf_status_free(st);
  _fail(file, line);
}

void rf_test_assert_status(rf_status *st, rf_code code, const char *sub,
                           const char *file, int line) {
  if (!st) {
    fprintf(stderr, "%s:%d: expected %s, got OK\n", file, line,
            rf_code_name(code));
    _fail(file, line);
  }
  int bad = rf_status_code(st) != code ||
            (sub && !strstr(rf_status_message(st), sub));
  if (bad) {
    fprintf(stderr, "%s:%d: expected %s containing \"%s\", got %s: %s\n", file,
            line, rf_code_name(code), sub ? sub : "",
            rf_code_name(rf_status_code(st)), rf_status_message(st));
    rf_status_free(st);
    _fail(file, line);
  }
  rf_status_free(st);
}

uint64_t rf_test_seed(void) {
  static uint64_t seed;
  if (seed) return seed;
  const char *env = getenv("RF_TEST_SEED");
  seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 2654435761u;
  if (!seed) seed = 1;
  fprintf(stderr, "RF_TEST_SEED=%llu\n", (unsigned long long)seed);
  return seed;
}

uint64_t rf_test_rng(uint64_t salt) {
  uint64_t s = rf_test_seed() ^ (salt * 0x9E3779B97F4A7C15ull);
  return s ? s : 1;
}

uint64_t rf_test_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

double rf_test_uniform(uint64_t *s, double lo, double hi) {
  double u = (double)(rf_test_rand(s) >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * u;
}

rf_tensor *rf_test_random_tensor(uint64_t *rng, rf_dtype dtype, rf_shape shape,
                                 double lo, double hi) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(dtype, &shape, NULL, &t));
  int64_t n = rf_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) {
    double v = rf_test_uniform(rng, lo, hi);
    if (rf_dtype_is_integer(dtype)) v = floor(v);
    if (dtype == RF_BOOL) v = v >= (lo + hi) / 2;
    rf_tensor_set(t, i, v);
  }
  return t;
}

double *rf_test_to_doubles(const rf_tensor *t) {
  int64_t n = rf_tensor_num_elements(t);
  double *d = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) d[i] = rf_tensor_get(t, i);
  return d;
}

double rf_test_tolerance(rf_dtype dtype) {
  switch (dtype) {
    case RF_FLOAT16: return 1e-2;
    case RF_BFLOAT16: return 4e-2;
    case RF_FLOAT32: return 1e-5;
    case RF_FLOAT64: return 1e-12;
    default: return 0;
  }
}

void rf_test_assert_same_bytes(const rf_tensor *got, const rf_tensor *want,
                               const char *file, int line) {
  if (!got || !want) {
    fprintf(stderr, "%s:%d: tensor is NULL\n", file, line);
    _fail(file, line);
  }
  rf_shape a = rf_tensor_shape(got), b = rf_tensor_shape(want);
  if (rf_tensor_dtype(got) != rf_tensor_dtype(want) ||
      !rf_shape_equal(&a, &b)) {
    char sa[128], sb[128];
    rf_shape_format(&a, sa, sizeof sa);
    rf_shape_format(&b, sb, sizeof sb);
    fprintf(stderr, "%s:%d: %s %s, want %s %s\n", file, line,
            rf_dtype_name(rf_tensor_dtype(got)), sa,
            rf_dtype_name(rf_tensor_dtype(want)), sb);
    _fail(file, line);
  }
  size_t n = rf_tensor_nbytes(want);
  if (n && memcmp(rf_tensor_data(got), rf_tensor_data(want), n) != 0) {
    const unsigned char *x = rf_tensor_data(got), *y = rf_tensor_data(want);
    size_t i = 0;
    while (x[i] == y[i]) i++;
    fprintf(stderr, "%s:%d: bytes differ first at byte %zu of %zu\n", file,
            line, i, n);
    _fail(file, line);
  }
}

void rf_test_assert_near(const rf_tensor *t, rf_shape shape, const double *want,
                         double tol, const char *file, int line) {
  if (!t) {
    fprintf(stderr, "%s:%d: tensor is NULL\n", file, line);
    _fail(file, line);
  }
  rf_shape got = rf_tensor_shape(t);
  if (!rf_shape_equal(&got, &shape)) {
    char a[128], b[128];
    rf_shape_format(&got, a, sizeof a);
    rf_shape_format(&shape, b, sizeof b);
    fprintf(stderr, "%s:%d: shape %s, want %s\n", file, line, a, b);
    _fail(file, line);
  }
  int64_t n = rf_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) {
    double g = rf_tensor_get(t, i), w = want[i];
    int ok = (isnan(w) && isnan(g)) || g == w ||
             fabs(g - w) <= tol * (1.0 + fabs(w));
    if (!ok) {
      fprintf(
          stderr,
          "%s:%d: element %lld of %s tensor: got %.17g, want %.17g (tol %g)\n",
          file, line, (long long)i, rf_dtype_name(rf_tensor_dtype(t)), g, w,
          tol);
      _fail(file, line);
    }
  }
}

rf_session *rf_test_threads_session(const rf_graph *g, int num_cpu_devices,
                                    int num_threads) {
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = num_cpu_devices;
  o.num_threads = num_threads;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

rf_session *rf_test_cpu_session(const rf_graph *g, int num_cpu_devices) {
  return rf_test_threads_session(g, num_cpu_devices, 0);
}

void rf_test_run(rf_graph *g, int num_cpu_devices, const rf_feed *feeds,
                 int nfeeds, const rf_output *fetches, int n,
                 rf_tensor **outs) {
  rf_session *s = rf_test_cpu_session(g, num_cpu_devices);
  assert_ok(rf_session_run(s, feeds, nfeeds, fetches, n, NULL, 0, outs));
  rf_session_free(s);
}

rf_status *rf_test_try_run(rf_graph *g, const rf_feed *feeds, int nfeeds,
                           const rf_output *fetches, int n, rf_tensor **outs) {
  rf_session *s = NULL;
  rf_status *st = rf_session_new(g, NULL, &s);
  if (st) return st;
  st = rf_session_run(s, feeds, nfeeds, fetches, n, NULL, 0, outs);
  rf_session_free(s);
  return st;
}

void rf_test_kernel_under_faults(const rf_node *node, rf_tensor *const *in) {
  enum { MAX_OUTS = 8 };
  int nout = rf_node_num_outputs(node);
  assert_true(nout <= MAX_OUTS);
  rf_tensor *outs[MAX_OUTS] = {NULL};
  int k;
  for (k = 1; k < 1000; k++) {
    rf_default_allocator_trim();
    int64_t live = rf_debug_live_allocations();
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf__kernel_run_single(node, in, outs);
    rf_debug_fail_allocation_after(0);
    if (!st) break;
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    for (int i = 0; i < nout; i++) assert_null(outs[i]);
    rf_default_allocator_trim();
    assert_int_equal(rf_debug_live_allocations(), live);
  }
  assert_true(k > 1 && k < 1000);
  for (int i = 0; i < nout; i++) rf_tensor_release(outs[i]);
}

double rf_test_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double rf_test_expect_run_error(rf_session *s, const rf_feed *feeds, int nfeeds,
                                const rf_output *fetches, int nfetches,
                                rf_code code, const char *const *subs,
                                int nsubs) {
  rf_tensor *out[16] = {NULL};
  assert_true(nfetches <= 16);
  double t0 = rf_test_now_ms();
  rf_status *st =
      rf_session_run(s, feeds, nfeeds, fetches, nfetches, NULL, 0, out);
  double dt = rf_test_now_ms() - t0;
  if (!st) fprintf(stderr, "the run succeeded after %.0f ms\n", dt);
  assert_non_null(st);
  for (int i = 0; i < nsubs; i++) {
    if (!strstr(rf_status_message(st), subs[i]))
      fprintf(stderr, "message lacks \"%s\": %s\n", subs[i],
              rf_status_message(st));
    assert_non_null(strstr(rf_status_message(st), subs[i]));
  }
  for (int i = 0; i < nfetches; i++) assert_null(out[i]);
  assert_status(st, code, NULL);
  return dt;
}

void rf_test_need_gpu(void) {
  static int probed, ok;
  if (!probed) {
    probed = 1;
    rf_graph *g = rf_graph_new();
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_gpu_devices = 1;
    rf_session *s = NULL;
    rf_status *st = rf_session_new(g, &o, &s);
    ok = st == NULL;
    if (st) {
      assert_int_equal(rf_status_code(st), RF_FAILED_PRECONDITION);
      printf("GPU tests skipped: %s\n", rf_status_message(st));
      fflush(stdout);
      rf_status_free(st);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
  if (!ok) skip();
}
