/* tests/test_cast.c - Cast between every pair of the nine numeric and bool
 * dtypes through sessions, on random values over (and beyond) each range plus
 * the hard cases: NaN, infinities, -0, saturation bounds, halfway points of
 * float16/bfloat16 (and doubles just past them, where rounding through float
 * would round twice), integers above 2^24 and 2^53. The reference (math_ref.h)
 * rounds the exact value once; results must match bit for bit in value. */
#include <stdlib.h>

#include "kernels/cpu/half.h"
#include "math_ref.h"
#include "testutil.h"

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const rf_dtype all_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                      RF_FLOAT64, RF_INT8,     RF_UINT8,
                                      RF_INT32,   RF_INT64,    RF_BOOL};

static const double float_specials[] = {
    NAN, INFINITY, -INFINITY, 0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5, 2.5,
    127.0, 127.9, 128.0, -128.0, -128.9, -129.0, 255.0, 255.5, 256.0, -1.0,
    -127.5, 126.5, -2147483647.5, 2147483646.5, -9223372036854774784.0,
    2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0, 3e9, -3e9,
    9223372036854775807.0, -9223372036854775808.0, 1e19, -1e19, 65504.0,
    65519.0, 65520.0, 70000.0, 1e-8, -3e-8, 5.960464477539063e-8,
    2.9802322387695312e-8, 1e-40, 3.4e38, -3.4e38, 1e300, -1e300,
    /* float16 halfway points, and just past them (round up, not to even) */
    1.00048828125, 1.00146484375, 1.00048828125 + 0x1p-40,
    -1.00048828125 - 0x1p-40, 2049.0, 2051.0, 2049.0 + 0x1p-30,
    /* bfloat16 halfway points and just past */
    1.00390625, 1.01171875, 1.00390625 + 0x1p-40, 257.0, 257.0 + 0x1p-30,
    3.3961e38, 3.3962e38};

/* clang-format off */
static const int64_t int_specials[] = {
    0, 1, -1, 127, 128, -128, -129, 255, 256, 2047, 2049, 65504, 65520,
    (1 << 24) + 1, 0x1008001, 0x1010001, -0x1010001, INT32_MAX, INT32_MIN,
    ((int64_t)1 << 40) + ((int64_t)1 << 32) + 1,
    (int64_t)1 << 53 | 1, ((int64_t)1 << 62) + 1, INT64_MAX, INT64_MIN,
    INT64_MIN + 1};
/* clang-format on */

/* Source values for dt: the special values that dt can hold, then random
 * values over a range wider than every destination's. */
static rf_tensor *source_values(rf_dtype dt, int64_t n, uint64_t *rng) {
  rf_shape s = rf_shape_make(1, &n);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(dt, &s, NULL, &t));
  int64_t i = 0;
  if (rf_dtype_is_float(dt)) {
    for (int k = 0; k < NELEM(float_specials) && i < n; k++)
      rf_tensor_set(t, i++, float_specials[k]);
    for (; i < n; i++) {
      double mag =
          pow(10.0, rf_test_uniform(rng, -9, dt == RF_FLOAT16 ? 5 : 20));
      rf_tensor_set(t, i, rf_test_uniform(rng, -1, 1) * mag);
    }
  } else if (dt == RF_BOOL) {
    for (; i < n; i++) rf_tensor_set(t, i, rf_test_uniform(rng, 0, 1) < 0.5);
  } else {
    for (int k = 0; k < NELEM(int_specials) && i < n; k++)
      if (int_specials[k] >= ref_int_min(dt) &&
          int_specials[k] <= ref_int_max(dt))
        ref_set_int(t, i++, int_specials[k]);
    for (; i < n; i++) {
      uint64_t r = rf_test_rand(rng);
      int shift = (int)(rf_test_rand(rng) % 64);
      uint64_t v = r >> shift;
      ref_set_int(t, i, (int64_t)(r & 1 ? 0 - v : v)); /* wraps, no UB */
    }
  }
  return t;
}

/* The value Cast must produce from v (exact) of dtype src into dst. */
static long double expected(rf_dtype src, rf_dtype dst, long double v) {
  if (dst == RF_BOOL) return v != 0; /* NaN is true */
  if (rf_dtype_is_float(dst)) return ref_round(dst, v);
  if (rf_dtype_is_float(src)) { /* truncate, saturate, NaN -> 0 */
    if (isnan(v)) return 0;
    long double tr = truncl(v);
    if (tr < (long double)ref_int_min(dst)) return ref_int_min(dst);
    if (tr > (long double)ref_int_max(dst)) return ref_int_max(dst);
    return tr;
  }
  return (long double)ref_wrap(dst, (__int128)v); /* integers wrap */
}

static void check_from(rf_dtype src, rf_shape shape, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", src, shape);
  rf_output ys[NELEM(all_dtypes)];
  for (int d = 0; d < NELEM(all_dtypes); d++) {
    ys[d] = rf_cast(g, NULL, x, all_dtypes[d]);
    assert_int_equal(rf_output_dtype(ys[d]), all_dtypes[d]);
  }
  assert_graph_ok(g);
  int64_t n = rf_shape_num_elements(&shape);
  rf_tensor *tx = source_values(src, n, rng);
  rf_tensor *flat = tx;
  assert_ok(rf_tensor_new_copy(src, &shape, rf_tensor_data(flat), &tx));
  rf_tensor_release(flat);
  rf_feed f = {x, tx};
  rf_tensor *res[NELEM(all_dtypes)];
  rf_test_run(g, 1, &f, 1, ys, NELEM(all_dtypes), res);
  for (int d = 0; d < NELEM(all_dtypes); d++) {
    rf_dtype dst = all_dtypes[d];
    rf_shape got = rf_tensor_shape(res[d]);
    assert_true(rf_shape_equal(&got, &shape));
    assert_int_equal(rf_tensor_dtype(res[d]), dst);
    for (int64_t i = 0; i < n; i++) {
      long double v = ref_get(tx, i), w = expected(src, dst, v),
                  r = ref_get(res[d], i);
      bool same_sign = !rf_dtype_is_float(dst) || signbit(r) == signbit(w);
      if (r == w && same_sign) continue; /* -0 stays -0 in floats */
      if (isnan(r) && isnan(w)) continue;
      fail_msg(
          "Cast %s -> %s of %.21Lg (element %lld): got %.21Lg, want "
          "%.21Lg",
          rf_dtype_name(src), rf_dtype_name(dst), v, (long long)i, r, w);
    }
    rf_tensor_release(res[d]);
  }
  rf_tensor_release(tx);
  rf_graph_free(g);
}

static void test_cast_every_pair(void **state) {
  uint64_t rng = rf_test_seed();
  for (int s = 0; s < NELEM(all_dtypes); s++)
    check_from(all_dtypes[s], rf_shape_make(1, (int64_t[]){1501}), &rng);
}

static void test_cast_small_shapes(void **state) {
  uint64_t rng = rf_test_seed() + 1;
  const rf_shape shapes[] = {rf_shape_scalar(),
                             rf_shape_make(1, (int64_t[]){0}),
                             rf_shape_make(2, (int64_t[]){3, 0}),
                             rf_shape_make(2, (int64_t[]){1, 1}),
                             rf_shape_make(3, (int64_t[]){2, 3, 5}),
                             rf_shape_make(1, (int64_t[]){20011})};
  for (int s = 0; s < NELEM(all_dtypes); s++)
    for (int k = 0; k < NELEM(shapes); k++)
      check_from(all_dtypes[s], shapes[k], &rng);
}

static void test_cast_errors(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_scalar());
  assert_null(rf_cast(g, "c", x, RF_RESOURCE).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(g);

  g = rf_graph_new();
  x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_scalar());
  assert_null(rf_cast(g, "c", x, RF_DTYPE_INVALID).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(g);
}

/* The kernels' inlined conversions agree with the public ones: every
 * float16, and floats sampled across all bit patterns (each sample with its
 * neighbours, so the rounding boundaries are covered). */
static void test_inline_half_conversions(void **state) {
  for (uint32_t h = 0; h < 65536; h++) {
    float a = rf__h2f((uint16_t)h), b = rf_half_to_float((uint16_t)h);
    if (rf__f2u(a) != rf__f2u(b) && !(isnan(a) && isnan(b)))
      fail_msg("float16 %#x: %g vs %g", h, a, b);
    a = rf__bf2f((uint16_t)h), b = rf_bfloat16_to_float((uint16_t)h);
    if (rf__f2u(a) != rf__f2u(b)) fail_msg("bfloat16 %#x: %g vs %g", h, a, b);
  }
  for (uint64_t base = 0; base < (UINT64_C(1) << 32); base += 65521) {
    for (uint32_t d = 0; d < 8; d++) {
      /* around the float16 (13 low bits) and bfloat16 (16) halfway points */
      uint32_t us[] = {(uint32_t)base + d, ((uint32_t)base | 0xfff) + d - 4,
                       ((uint32_t)base | 0x7fff) + d - 4};
      for (int k = 0; k < 3; k++) {
        float f = rf__u2f(us[k]);
        if (rf__f2h(f) != rf_float_to_half(f))
          fail_msg("to float16 %#x: %#x vs %#x", us[k], rf__f2h(f),
                   rf_float_to_half(f));
        if (rf__f2bf(f) != rf_float_to_bfloat16(f))
          fail_msg("to bfloat16 %#x: %#x vs %#x", us[k], rf__f2bf(f),
                   rf_float_to_bfloat16(f));
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cast_every_pair),
      cmocka_unit_test(test_cast_small_shapes),
      cmocka_unit_test(test_cast_errors),
      cmocka_unit_test(test_inline_half_conversions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
