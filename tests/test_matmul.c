/* tests/test_matmul.c - MatMul through sessions: every dtype, all four
 * transpose combinations, empty, 1x1, odd, short-sided and BLAS-sized shapes
 * (products split into blocks of rows or of columns among them), against a
 * float64 (integers: wrapping) reference computed here; shapes hidden from the
 * graph for half the cases; and the error paths (inner dims, rank, dtypes). */
#include "math_ref.h"
#include "testutil.h"

#define SHAPE(...)                                           \
  rf_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), \
                (int64_t[]){__VA_ARGS__})
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct mnk {
  int64_t m, k, n;
} mnk;

/* {16, 45, 33}, {7, 300, 100} and, transposed, {100, 16, 47} have the short
 * side that float32 takes through kernels/cpu/sgemm_small.c (few rows of
 * A B, short sums of A^T B). The last three (float32 and float64 only: the
 * BLAS path) are big enough to be split across the pool: by rows (m > n) and
 * by columns (n > m); {16, 200, 600} and {600, 16, 200} are the short-side
 * kernel's blocks of columns of A B and of rows of A^T B. */
#define NSPLIT 3
static const mnk sizes[] = {{1, 1, 1},      {3, 5, 4},      {0, 3, 2},
                            {2, 0, 3},      {2, 3, 0},      {17, 33, 9},
                            {1, 257, 1},    {40, 70, 65},   {16, 45, 33},
                            {7, 300, 100},  {100, 16, 47},  {100, 120, 90},
                            {64, 200, 301}, {16, 200, 600}, {600, 16, 200}};
#define NCASES (NELEM(sizes) * 4)

/* op(X)[r][c] where X is stored transposed when t. */
static long double at(const rf_tensor *x, bool t, int64_t r, int64_t c) {
  rf_shape s = rf_tensor_shape(x);
  return t ? ref_get(x, c * s.dims[1] + r) : ref_get(x, r * s.dims[1] + c);
}

static void check_product(const rf_tensor *a, const rf_tensor *b,
                          const rf_tensor *c, bool ta, bool tb, mnk d,
                          rf_dtype dt) {
  rf_shape want = SHAPE(d.m, d.n);
  rf_shape got = rf_tensor_shape(c);
  assert_true(rf_shape_equal(&got, &want));
  assert_int_equal(rf_tensor_dtype(c), dt);
  bool integer = rf_dtype_is_integer(dt);
  for (int64_t i = 0; i < d.m; i++) {
    for (int64_t j = 0; j < d.n; j++) {
      long double sum = 0, scale = 0;
      unsigned __int128 isum = 0;
      for (int64_t k = 0; k < d.k; k++) {
        long double x = at(a, ta, i, k), y = at(b, tb, k, j);
        sum += x * y;
        scale += fabsl(x * y);
        if (integer)
          isum +=
              (unsigned __int128)(__int128)x * (unsigned __int128)(__int128)y;
      }
      long double g = ref_get(c, i * d.n + j);
      if (integer) {
        long double w = (long double)ref_wrap(dt, (__int128)isum);
        if (g != w)
          fail_msg(
              "MatMul %s ta=%d tb=%d (%lld,%lld,%lld) [%lld,%lld]: got "
              "%.0Lf, want %.0Lf",
              rf_dtype_name(dt), ta, tb, (long long)d.m, (long long)d.k,
              (long long)d.n, (long long)i, (long long)j, g, w);
      } else if (fabsl(g - sum) > rf_test_tolerance(dt) * (1 + scale)) {
        fail_msg(
            "MatMul %s ta=%d tb=%d (%lld,%lld,%lld) [%lld,%lld]: got "
            "%.17Lg, want %.17Lg",
            rf_dtype_name(dt), ta, tb, (long long)d.m, (long long)d.k,
            (long long)d.n, (long long)i, (long long)j, g, sum);
      }
    }
  }
}

static void check_dtype(rf_dtype dt, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_feed feeds[2 * NCASES];
  rf_output outs[NCASES];
  int n = 0;
  int nsizes = NELEM(sizes);
  if (dt != RF_FLOAT32 && dt != RF_FLOAT64) nsizes -= NSPLIT;
  for (int s = 0; s < nsizes; s++) {
    for (int t = 0; t < 4; t++, n++) {
      bool ta = t & 1, tb = t & 2;
      mnk d = sizes[s];
      rf_shape sa = ta ? SHAPE(d.k, d.m) : SHAPE(d.m, d.k);
      rf_shape sb = tb ? SHAPE(d.n, d.k) : SHAPE(d.k, d.n);
      bool hide = n % 2;
      rf_output a = rf_placeholder(g, NULL, dt, hide ? rf_shape_unknown() : sa);
      rf_output b = rf_placeholder(g, NULL, dt, hide ? SHAPE(-1, -1) : sb);
      outs[n] = rf_matmul(g, NULL, a, b, ta, tb);
      assert_graph_ok(g);
      rf_shape inferred = rf_output_shape(outs[n]);
      rf_shape want = hide ? SHAPE(-1, -1) : SHAPE(d.m, d.n);
      assert_true(rf_shape_equal(&inferred, &want));
      feeds[2 * n] = (rf_feed){a, ref_random(rng, dt, sa, -1, 1)};
      feeds[2 * n + 1] = (rf_feed){b, ref_random(rng, dt, sb, -1, 1)};
    }
  }
  rf_tensor *res[NCASES];
  rf_test_run(g, 1, feeds, 2 * n, outs, n, res);
  for (int c = 0; c < n; c++) {
    check_product(feeds[2 * c].value, feeds[2 * c + 1].value, res[c], c & 1,
                  c & 2, sizes[c / 4], dt);
    rf_tensor_release(feeds[2 * c].value);
    rf_tensor_release(feeds[2 * c + 1].value);
    rf_tensor_release(res[c]);
  }
  rf_graph_free(g);
}

static void test_matmul_all_dtypes_and_transposes(void **state) {
  uint64_t rng = rf_test_seed();
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                          RF_FLOAT64, RF_INT32,    RF_INT64};
  for (int d = 0; d < NELEM(dts); d++) check_dtype(dts[d], &rng);
}

/* Partly known shapes: m and n come from whichever side knows them. */
static void test_matmul_shape_inference(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", RF_FLOAT32, SHAPE(-1, 3));
  rf_output b = rf_placeholder(g, "b", RF_FLOAT32, SHAPE(3, 5));
  rf_output c = rf_matmul(g, NULL, a, b, false, false);
  rf_output d = rf_matmul(g, NULL, b, a, true, true);
  rf_output e = rf_matmul(
      g, NULL, a, rf_placeholder(g, "u", RF_FLOAT32, rf_shape_unknown()), false,
      false);
  assert_graph_ok(g);
  rf_shape want_c = SHAPE(-1, 5), want_d = SHAPE(5, -1), want_e = SHAPE(-1, -1);
  rf_shape sc = rf_output_shape(c), sd = rf_output_shape(d),
           se = rf_output_shape(e);
  assert_true(rf_shape_equal(&sc, &want_c));
  assert_true(rf_shape_equal(&sd, &want_d));
  assert_true(rf_shape_equal(&se, &want_e));
  rf_graph_free(g);
}

static void expect_build_error(rf_shape sa, rf_shape sb, rf_dtype da,
                               rf_dtype db, bool ta, bool tb, const char *sub) {
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", da, sa);
  rf_output b = rf_placeholder(g, "b", db, sb);
  assert_null(rf_matmul(g, "mm", a, b, ta, tb).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, sub);
  rf_graph_free(g);
}

static void test_matmul_build_errors(void **state) {
  expect_build_error(SHAPE(2, 3), SHAPE(4, 5), RF_FLOAT32, RF_FLOAT32, false,
                     false, "Matrix size-incompatible");
  expect_build_error(SHAPE(2, 3), SHAPE(4, 5), RF_FLOAT32, RF_FLOAT32, true,
                     false, "inner dimensions 2 and 4");
  expect_build_error(SHAPE(2, 3), SHAPE(5, 2), RF_INT32, RF_INT32, false, true,
                     "inner dimensions 3 and 2");
  expect_build_error(SHAPE(2, 3, 4), SHAPE(4, 5), RF_FLOAT32, RF_FLOAT32, false,
                     false, "rank-2");
  expect_build_error(SHAPE(3), SHAPE(3, 5), RF_FLOAT32, RF_FLOAT32, false,
                     false, "rank-2");
  expect_build_error(SHAPE(2, 3), SHAPE(3, 5), RF_FLOAT32, RF_FLOAT64, false,
                     false, NULL); /* dtype mismatch */
  expect_build_error(SHAPE(2, 3), SHAPE(3, 5), RF_INT8, RF_INT8, false, false,
                     NULL); /* int8 is not a MatMul dtype */
}

static void expect_run_error(rf_shape sa, rf_shape sb, const char *sub) {
  uint64_t rng = rf_test_seed() + 1;
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", RF_FLOAT32, rf_shape_unknown());
  rf_output b = rf_placeholder(g, "b", RF_FLOAT32, rf_shape_unknown());
  rf_output c = rf_matmul(g, "mm", a, b, false, false);
  assert_graph_ok(g);
  rf_tensor *ta = rf_test_random_tensor(&rng, RF_FLOAT32, sa, 0, 1);
  rf_tensor *tb = rf_test_random_tensor(&rng, RF_FLOAT32, sb, 0, 1);
  rf_feed feeds[] = {{a, ta}, {b, tb}};
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, NULL, &s));
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, feeds, 2, &c, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, sub);
  assert_null(out);
  rf_session_free(s);
  rf_tensor_release(ta);
  rf_tensor_release(tb);
  rf_graph_free(g);
}

static void test_matmul_run_time_errors(void **state) {
  expect_run_error(SHAPE(2, 3), SHAPE(4, 5), "inner dimensions 3 and 4");
  expect_run_error(SHAPE(2, 3, 1), SHAPE(3, 5), "rank-2");
  expect_run_error(SHAPE(2, 3), SHAPE(3), "rank-2");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_all_dtypes_and_transposes),
      cmocka_unit_test(test_matmul_shape_inference),
      cmocka_unit_test(test_matmul_build_errors),
      cmocka_unit_test(test_matmul_run_time_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
