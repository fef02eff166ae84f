/* tests/test_tensor.c - the core layer: dtypes and the 16-bit float
 * conversions (known bit patterns, all 65536 values against a float64
 * reference, round to nearest even), shapes, statuses, tensors of every dtype,
 * the caching allocator and allocation failures. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "ringflow/debug.h"
#include "testutil.h"

/* ---- 16-bit floats ---- */

/* IEEE half from its fields, computed in double. */
static double half_ref(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 31)
    v = man ? NAN : INFINITY;
  else if (exp == 0)
    v = ldexp(man, -24);
  else
    v = ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}

static double bf16_ref(uint16_t b) {
  int sign = b >> 15, exp = (b >> 7) & 255, man = b & 127;
  double v;
  if (exp == 255)
    v = man ? NAN : INFINITY;
  else if (exp == 0)
    v = ldexp(man, -133);
  else
    v = ldexp(128 + man, exp - 134);
  return sign ? -v : v;
}

static void test_half_known_patterns(void **state) {
  const struct {
    float f;
    uint16_t h;
  } cases[] = {
      {0.0f, 0x0000},         {-0.0f, 0x8000},        {1.0f, 0x3c00},
      {-2.0f, 0xc000},        {0.5f, 0x3800},         {65504.0f, 0x7bff},
      {65519.0f, 0x7bff},     {65520.0f, 0x7c00},     {1e10f, 0x7c00},
      {0x1p-24f, 0x0001},     {0x1p-14f, 0x0400},     {0x1p-25f, 0x0000},
      {0x1.8p-24f, 0x0002},   {0x1p-26f, 0x0000},     {0.1f, 0x2e66},
      {1.0f / 3, 0x3555},     {1 + 0x1p-11f, 0x3c00}, {1 + 0x3p-11f, 0x3c02},
      {-INFINITY, 0xfc00},    {INFINITY, 0x7c00},     {0x1.ff8p-15f, 0x03ff},
      {0x1.ffcp-15f, 0x0400}, {0x1.ff4p-15f, 0x03fe},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = rf_float_to_half(cases[i].f);
    if (got != cases[i].h)
      fprintf(stderr, "%a -> %04x, want %04x\n", cases[i].f, got, cases[i].h);
    assert_int_equal(got, cases[i].h);
  }
  uint16_t n = rf_float_to_half(NAN);
  assert_true((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
  assert_true(rf_half_to_float(0x3c00) == 1.0f);
  assert_true(rf_half_to_float(0x7bff) == 65504.0f);
  assert_true(isnan(rf_half_to_float(0x7e00)));
}

static void test_bfloat16_known_patterns(void **state) {
  const struct {
    float f;
    uint16_t b;
  } cases[] = {
      {0.0f, 0x0000},        {-0.0f, 0x8000},         {1.0f, 0x3f80},
      {-2.0f, 0xc000},       {3.140625f, 0x4049},     {3.14159274f, 0x4049},
      {1 + 0x1p-8f, 0x3f80}, {1 + 0x3p-8f, 0x3f82},   {INFINITY, 0x7f80},
      {-INFINITY, 0xff80},   {3.4028235e38f, 0x7f80}, {0x1p-133f, 0x0001},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = rf_float_to_bfloat16(cases[i].f);
    if (got != cases[i].b)
      fprintf(stderr, "%a -> %04x, want %04x\n", cases[i].f, got, cases[i].b);
    assert_int_equal(got, cases[i].b);
  }
  assert_true(isnan(rf_bfloat16_to_float(rf_float_to_bfloat16(NAN))));
}

static void test_all_16bit_values_round_trip(void **state) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    double want = half_ref(h);
    float f = rf_half_to_float(h);
    if (isnan(want)) {
      assert_true(isnan(f));
      assert_true(isnan(half_ref(rf_float_to_half(f))));
    } else {
      assert_true((double)f == want);
      assert_true(!signbit(f) == !signbit(want));
      assert_int_equal(rf_float_to_half(f), h);
    }
    want = bf16_ref(h);
    f = rf_bfloat16_to_float(h);
    if (isnan(want)) {
      assert_true(isnan(f));
      assert_true(isnan(bf16_ref(rf_float_to_bfloat16(f))));
    } else {
      assert_true((double)f == want);
      assert_int_equal(rf_float_to_bfloat16(f), h);
    }
  }
}

/* h is the representable value nearest to f (ties: even mantissa), checked
 * against both neighbours with the float64 reference. */
static void check_nearest(double (*ref)(uint16_t), uint16_t h, double f,
                          uint16_t max_finite) {
  double got = ref(h), err = fabs(got - f);
  uint16_t mag = h & 0x7fff, sign = h & 0x8000;
  if (mag > max_finite) return; /* overflow to inf is checked elsewhere */
  for (int d = -1; d <= 1; d += 2) {
    int nm = (int)mag + d;
    if (nm < 0 || nm > max_finite) continue;
    double other = fabs(ref((uint16_t)(sign | nm)) - f);
    if (other < err) {
      fprintf(stderr, "%.17g -> %04x (err %g), neighbour %04x closer (%g)\n", f,
              h, err, sign | nm, other);
      fail();
    }
    if (other == err) assert_int_equal(mag & 1, 0);
  }
}

static void test_rounding_random(void **state) {
  uint64_t rng = rf_test_seed();
  for (int i = 0; i < 200000; i++) {
    uint32_t bits = (uint32_t)rf_test_rand(&rng);
    /* Exponents around the half range: 2^-27 .. 2^16. */
    uint32_t exp = 100 + (uint32_t)(rf_test_rand(&rng) % 44);
    bits = (bits & 0x807fffffu) | (exp << 23);
    float f;
    memcpy(&f, &bits, 4);
    check_nearest(half_ref, rf_float_to_half(f), f, 0x7bff);
    memcpy(&bits, &f, 4);
    bits =
        (bits & 0x807fffffu) | ((uint32_t)(1 + rf_test_rand(&rng) % 253) << 23);
    memcpy(&f, &bits, 4);
    check_nearest(bf16_ref, rf_float_to_bfloat16(f), f, 0x7f7f);
  }
}

/* ---- dtypes, shapes, statuses ---- */

static void test_dtypes(void **state) {
  const char *names[] = {"float16", "bfloat16", "float32", "float64",
                         "int8",    "uint8",    "int32",   "int64",
                         "bool",    "resource"};
  const size_t sizes[] = {2, 2, 4, 8, 1, 1, 4, 8, 1, 8};
  for (int d = 0; d < RF_DTYPE_COUNT; d++) {
    assert_string_equal(rf_dtype_name((rf_dtype)d), names[d]);
    assert_int_equal(rf_dtype_from_name(names[d]), d);
    assert_int_equal(rf_dtype_size((rf_dtype)d), sizes[d]);
    assert_int_equal(rf_dtype_is_float((rf_dtype)d), d <= RF_FLOAT64);
    assert_int_equal(rf_dtype_is_integer((rf_dtype)d),
                     d >= RF_INT8 && d <= RF_INT64);
  }
  assert_string_equal(rf_dtype_name(RF_DTYPE_INVALID), "invalid");
  assert_string_equal(rf_dtype_name(RF_DTYPE_COUNT), "invalid");
  assert_int_equal(rf_dtype_size(RF_DTYPE_INVALID), 0);
  assert_int_equal(rf_dtype_from_name("float"), RF_DTYPE_INVALID);
  assert_int_equal(rf_dtype_from_name(NULL), RF_DTYPE_INVALID);
}

static void test_shapes(void **state) {
  rf_shape s = rf_shape_of(3, 2, -1, 4);
  assert_int_equal(s.rank, 3);
  assert_int_equal(s.dims[1], RF_UNKNOWN_DIM);
  assert_false(rf_shape_is_fully_defined(&s));
  assert_int_equal(rf_shape_num_elements(&s), -1);
  char buf[64];
  rf_shape_format(&s, buf, sizeof buf);
  assert_string_equal(buf, "(2, ?, 4)");
  rf_shape f = rf_shape_of(2, 6, 7);
  assert_true(rf_shape_is_fully_defined(&f));
  assert_int_equal(rf_shape_num_elements(&f), 42);
  rf_shape sc = rf_shape_scalar(), sc2 = rf_shape_of(0);
  assert_true(rf_shape_equal(&sc, &sc2));
  assert_int_equal(rf_shape_num_elements(&sc), 1);
  rf_shape_format(&sc, buf, sizeof buf);
  assert_string_equal(buf, "()");
  rf_shape u = rf_shape_unknown();
  rf_shape_format(&u, buf, sizeof buf);
  assert_string_equal(buf, "<unknown>");
  assert_false(rf_shape_equal(&u, &sc));
  assert_false(rf_shape_equal(&s, NULL));
  int64_t dims[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  assert_int_equal(rf_shape_make(9, dims).rank, RF_UNKNOWN_RANK);
  assert_int_equal(rf_shape_make(8, dims).rank, 8);
  assert_int_equal(rf_shape_make(-3, dims).rank, RF_UNKNOWN_RANK);
  assert_int_equal(rf_shape_make(2, NULL).rank, RF_UNKNOWN_RANK);
  rf_shape z = rf_shape_of(2, 0, 5);
  assert_int_equal(rf_shape_num_elements(&z), 0);
  /* The variadic function itself, called with int64_t arguments. */
  rf_shape v = (rf_shape_of)(2, (int64_t)3, (int64_t)-1);
  rf_shape w = rf_shape_of(2, 3, -1);
  assert_true(rf_shape_equal(&v, &w));
  assert_int_equal((rf_shape_of)(9).rank, RF_UNKNOWN_RANK);
  char tiny[4];
  rf_shape_format(&f, tiny, sizeof tiny);
  assert_string_equal(tiny, "(6,");
}

static void test_statuses(void **state) {
  assert_null(rf_status_new(RF_OK, "fine"));
  assert_int_equal(rf_status_code(NULL), RF_OK);
  assert_string_equal(rf_status_message(NULL), "");
  rf_status *st = rf_status_new(RF_NOT_FOUND, "x=%d", 42);
  assert_int_equal(rf_status_code(st), RF_NOT_FOUND);
  assert_string_equal(rf_status_message(st), "x=42");
  st = rf__status_prefix(st, "node '%s'", "n");
  assert_string_equal(rf_status_message(st), "node 'n': x=42");
  rf_status_free(st);
  assert_null(rf__status_prefix(NULL, "p"));
  assert_string_equal(rf_code_name(RF_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  assert_string_equal(rf_code_name(RF_DATA_LOSS), "DATA_LOSS");
  assert_string_equal(rf_code_name((rf_code)99), "UNKNOWN_CODE");
  rf_status *oom = rf__oom();
  assert_int_equal(rf_status_code(oom), RF_RESOURCE_EXHAUSTED);
  rf_status_free(oom); /* static: ignored */
  assert_int_equal(rf_status_code(rf__oom()), RF_RESOURCE_EXHAUSTED);
  rf_status_free(NULL);
  /* Out of memory while making a status gives the static one. */
  rf_debug_fail_allocation_after(1);
  st = rf_status_new(RF_INTERNAL, "lost");
  rf_debug_fail_allocation_after(0);
  assert_ptr_equal(st, rf__oom());
}

/* ---- tensors ---- */

static void test_tensors_every_dtype(void **state) {
  uint64_t rng = rf_test_seed() + 1;
  for (int d = 0; d < RF_DTYPE_COUNT; d++) {
    rf_dtype dt = (rf_dtype)d;
    if (dt == RF_RESOURCE) continue;
    rf_shape s = rf_shape_of(2, 3, 5);
    rf_tensor *t = NULL;
    assert_ok(rf_tensor_new(dt, &s, NULL, &t));
    assert_int_equal(rf_tensor_dtype(t), dt);
    rf_shape got = rf_tensor_shape(t);
    assert_true(rf_shape_equal(&got, &s));
    assert_int_equal(rf_tensor_num_elements(t), 15);
    assert_int_equal(rf_tensor_nbytes(t), 15 * rf_dtype_size(dt));
    assert_int_equal((uintptr_t)rf_tensor_data(t) % RF_TENSOR_ALIGNMENT, 0);
    double want[15];
    for (int i = 0; i < 15; i++) {
      double v = rf_test_uniform(&rng, -100, 100);
      if (rf_dtype_is_integer(dt)) v = floor(v);
      if (dt == RF_UINT8) v = fabs(v);
      if (dt == RF_BOOL) v = v > 0;
      /* The reference: the value after rounding to the dtype. */
      if (dt == RF_FLOAT16) v = half_ref(rf_float_to_half((float)v));
      if (dt == RF_BFLOAT16) v = bf16_ref(rf_float_to_bfloat16((float)v));
      if (dt == RF_FLOAT32) v = (float)v;
      want[i] = v;
      rf_tensor_set(t, i, v);
    }
    assert_tensor_near(t, s, want, 0);
    /* A copy holds the same bytes. */
    rf_tensor *c = NULL;
    assert_ok(rf_tensor_new_copy(dt, &s, rf_tensor_data(t), &c));
    assert_memory_equal(rf_tensor_data(c), rf_tensor_data(t),
                        rf_tensor_nbytes(t));
    rf_tensor_release(c);
    /* Scalars. */
    assert_ok(rf_tensor_new_scalar(dt, 1, &c));
    assert_int_equal(rf_tensor_num_elements(c), 1);
    assert_true(rf_tensor_get(c, 0) == 1.0);
    rf_tensor_release(c);
    /* Out of range indices read 0 and write nothing. */
    assert_true(rf_tensor_get(t, 15) == 0.0);
    assert_true(rf_tensor_get(t, -1) == 0.0);
    rf_tensor_set(t, 15, 3);
    assert_ptr_equal(rf_tensor_retain(t), t);
    rf_tensor_release(t);
    rf_tensor_release(t);
  }
}

static void test_tensor_conversions_and_errors(void **state) {
  rf_shape s = rf_shape_of(1, 4);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(RF_INT8, &s, NULL, &t));
  rf_tensor_set(t, 0, 300);
  rf_tensor_set(t, 1, -300);
  rf_tensor_set(t, 2, NAN);
  rf_tensor_set(t, 3, -7.9);
  double want8[4] = {127, -128, 0, -7};
  assert_tensor_near(t, s, want8, 0);
  rf_tensor_release(t);
  assert_ok(rf_tensor_new(RF_UINT8, &s, NULL, &t));
  rf_tensor_set(t, 0, -5);
  rf_tensor_set(t, 1, 256);
  rf_tensor_set(t, 2, 255);
  rf_tensor_set(t, 3, 0.5);
  double wantu[4] = {0, 255, 255, 0};
  assert_tensor_near(t, s, wantu, 0);
  rf_tensor_release(t);
  assert_ok(rf_tensor_new(RF_INT64, &s, NULL, &t));
  rf_tensor_set(t, 0, 1e30);
  rf_tensor_set(t, 1, -1e30);
  assert_true(((const int64_t *)rf_tensor_data(t))[0] > 9e18);
  assert_true(((const int64_t *)rf_tensor_data(t))[1] == INT64_MIN);
  rf_tensor_release(t);
  /* Zero elements: a valid, non-NULL buffer. */
  rf_shape z = rf_shape_of(2, 0, 3);
  assert_ok(rf_tensor_new(RF_FLOAT32, &z, NULL, &t));
  assert_non_null(rf_tensor_data(t));
  assert_int_equal(rf_tensor_nbytes(t), 0);
  rf_tensor_release(t);
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &z, NULL, &t));
  rf_tensor_release(t);

  t = (rf_tensor *)&t;
  rf_tensor *keep = t;
  rf_shape u = rf_shape_of(2, -1, 3);
  assert_status(rf_tensor_new(RF_FLOAT32, &u, NULL, &t), RF_INVALID_ARGUMENT,
                "(?, 3) is not fully defined");
  assert_status(rf_tensor_new(RF_DTYPE_INVALID, &s, NULL, &t),
                RF_INVALID_ARGUMENT, "invalid dtype");
  assert_status(rf_tensor_new(RF_FLOAT32, NULL, NULL, &t), RF_INVALID_ARGUMENT,
                NULL);
  assert_status(rf_tensor_new(RF_FLOAT32, &s, NULL, NULL), RF_INVALID_ARGUMENT,
                NULL);
  assert_status(rf_tensor_new_copy(RF_FLOAT32, &s, NULL, &t),
                RF_INVALID_ARGUMENT, "NULL data");
  assert_status(rf_tensor_new_scalar(RF_RESOURCE, 1, &t), RF_INVALID_ARGUMENT,
                NULL);
  rf_shape huge = rf_shape_of(2, (int64_t)1 << 40, (int64_t)1 << 20);
  assert_status(rf_tensor_new(RF_FLOAT64, &huge, NULL, &t),
                RF_RESOURCE_EXHAUSTED, "too many");
  /* 2^70 elements: the count overflows int64 (it once wrapped to 64); no
   * tensor can have that shape. */
  rf_shape wrap = rf_shape_of(2, (int64_t)1 << 40, (int64_t)1 << 30);
  assert_int_equal(rf_shape_num_elements(&wrap), -1);
  assert_status(rf_tensor_new(RF_FLOAT64, &wrap, NULL, &t), RF_INVALID_ARGUMENT,
                "element count overflows int64");
  assert_ptr_equal(t, keep);
  /* NULL tensors read as empty. */
  assert_int_equal(rf_tensor_dtype(NULL), RF_DTYPE_INVALID);
  assert_int_equal(rf_tensor_num_elements(NULL), -1);
  assert_int_equal(rf_tensor_nbytes(NULL), 0);
  assert_null(rf_tensor_data(NULL));
  assert_int_equal(rf_tensor_shape(NULL).rank, RF_UNKNOWN_RANK);
  rf_tensor_release(NULL);
  assert_null(rf_tensor_retain(NULL));
}

/* ---- the caching allocator ---- */

static void test_allocator_reuse(void **state) {
  rf_allocator *a = rf_default_allocator();
  size_t cached0, used0, cached1, used1;
  rf_default_allocator_stats(&cached0, &used0);
  void *p = a->alloc(a->state, 1000, RF_TENSOR_ALIGNMENT);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % RF_TENSOR_ALIGNMENT, 0);
  rf_default_allocator_stats(&cached1, &used1);
  assert_int_equal(used1, used0 + 1024); /* 1000 rounds up to its class */
  memset(p, 1, 1000);
  a->free(a->state, p, 1000);
  rf_default_allocator_stats(&cached1, &used1);
  assert_int_equal(used1, used0);
  assert_int_equal(cached1, cached0 + 1024);
  /* Same size class (1000 and 980 both round to 1024): same block. */
  void *q = a->alloc(a->state, 980, RF_TENSOR_ALIGNMENT);
  assert_ptr_equal(q, p);
  /* Another class: another block. */
  void *r = a->alloc(a->state, 3000, RF_TENSOR_ALIGNMENT);
  assert_ptr_not_equal(r, q);
  a->free(a->state, q, 980);
  a->free(a->state, r, 3000);
  /* Tensors go through it too: a released buffer comes back. */
  rf_shape s = rf_shape_of(1, 777);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &t));
  const void *data = rf_tensor_data(t);
  rf_tensor_release(t);
  assert_ok(rf_tensor_new(RF_INT32, &s, NULL, &t));
  assert_ptr_equal(rf_tensor_data(t), data);
  rf_tensor_release(t);
  /* Large blocks are huge-page aligned. */
  void *big = a->alloc(a->state, (size_t)3 << 20, RF_TENSOR_ALIGNMENT);
  assert_non_null(big);
  assert_int_equal((uintptr_t)big % ((size_t)2 << 20), 0);
  a->free(a->state, big, (size_t)3 << 20);
  rf_default_allocator_trim();
  rf_default_allocator_stats(&cached1, &used1);
  assert_int_equal(cached1, 0);
  assert_int_equal(used1, used0);
  rf_default_allocator_stats(NULL, NULL);
}

/* A block asked for with a stricter alignment than 64 bytes is aligned so,
 * counted in use, and, once freed and cached by its size class, big enough
 * for any request of that class: it was allocated at the size asked for
 * (1000 bytes) and handed out again as 1024, past its end. */
static void test_allocator_stricter_alignment(void **state) {
  (void)state;
  rf_allocator *a = rf_default_allocator();
  rf_default_allocator_trim();
  size_t cached0, used0, cached1, used1;
  rf_default_allocator_stats(&cached0, &used0);
  void *p = a->alloc(a->state, 1000, 4096);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 4096, 0);
  rf_default_allocator_stats(&cached1, &used1);
  assert_int_equal(used1, used0 + 1024);
  a->free(a->state, p, 1000);
  rf_default_allocator_stats(&cached1, &used1);
  assert_int_equal(used1, used0);
  assert_int_equal(cached1, cached0 + 1024);
  void *q = a->alloc(a->state, 1024, RF_TENSOR_ALIGNMENT);
  assert_ptr_equal(q, p);
  memset(q, 7, 1024); /* the whole class's size is the block's */
  a->free(a->state, q, 1024);
  /* an alignment that is not a power of two: refused, not cached */
  assert_null(a->alloc(a->state, 100, 96));
  rf_default_allocator_trim();
  rf_default_allocator_stats(&cached1, &used1);
  assert_int_equal(cached1, 0);
  assert_int_equal(used1, used0);
}

static void test_tensor_allocation_failures(void **state) {
  rf_default_allocator_trim(); /* so the buffer is a fresh allocation too */
  rf_shape s = rf_shape_of(2, 33, 17);
  int failures = 0;
  for (int k = 1;; k++) {
    int64_t live = rf_debug_live_allocations();
    rf_tensor *t = NULL;
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf_tensor_new(RF_FLOAT64, &s, NULL, &t);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      rf_tensor_release(t);
      rf_default_allocator_trim();
      assert_int_equal(rf_debug_live_allocations(), live);
      break;
    }
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    assert_null(t);
    assert_int_equal(rf_debug_live_allocations(), live);
    failures++;
  }
  assert_int_equal(failures, 2); /* the tensor struct, then its buffer */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_half_known_patterns),
      cmocka_unit_test(test_bfloat16_known_patterns),
      cmocka_unit_test(test_all_16bit_values_round_trip),
      cmocka_unit_test(test_rounding_random),
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_statuses),
      cmocka_unit_test(test_tensors_every_dtype),
      cmocka_unit_test(test_tensor_conversions_and_errors),
      cmocka_unit_test(test_allocator_reuse),
      cmocka_unit_test(test_allocator_stricter_alignment),
      cmocka_unit_test(test_tensor_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
