/* tests/math_ref.h - reference arithmetic for the math op tests, written
 * independently of the library: exact element reads, rounding of a long double
 * to each float format (nearest even, from the exact value), two's-complement
 * wrapping to each integer type, and numpy broadcast indexing. Header-only
 * (static functions) so each test executable stays one .c file. */
#ifndef RF_TESTS_MATH_REF_H
#define RF_TESTS_MATH_REF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ringflow/ringflow.h"
#include "testutil.h"

static const rf_dtype ref_float_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                            RF_FLOAT64};
static const rf_dtype ref_int_dtypes[] = {RF_INT8, RF_UINT8, RF_INT32,
                                          RF_INT64};
static const rf_dtype ref_numeric_dtypes[] = {
    RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64,
    RF_INT8,    RF_UINT8,    RF_INT32,   RF_INT64};

/* Element i exactly: floats widen exactly to long double, int64 too. */
static inline long double ref_get(const rf_tensor *t, int64_t i) {
  const void *d = rf_tensor_data(t);
  switch (rf_tensor_dtype(t)) {
    case RF_INT64: return (long double)((const int64_t *)d)[i];
    default: return rf_tensor_get(t, i); /* exact for every other dtype */
  }
}

static inline int64_t ref_get_int(const rf_tensor *t, int64_t i) {
  const void *d = rf_tensor_data(t);
  switch (rf_tensor_dtype(t)) {
    case RF_INT8: return ((const int8_t *)d)[i];
    case RF_UINT8: return ((const uint8_t *)d)[i];
    case RF_INT32: return ((const int32_t *)d)[i];
    case RF_INT64: return ((const int64_t *)d)[i];
    case RF_BOOL: return ((const uint8_t *)d)[i];
    default: return 0;
  }
}

static inline void ref_set_int(rf_tensor *t, int64_t i, int64_t v) {
  void *d = rf_tensor_mutable_data(t);
  switch (rf_tensor_dtype(t)) {
    case RF_INT8: ((int8_t *)d)[i] = (int8_t)v; break;
    case RF_UINT8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case RF_INT32: ((int32_t *)d)[i] = (int32_t)v; break;
    case RF_INT64: ((int64_t *)d)[i] = v; break;
    default: break;
  }
}

/* v rounded to a binary format with p significant bits, minimum normal
 * exponent emin and largest finite value maxv: nearest, ties to even. */
static inline long double ref_round_format(long double v, int p, int emin,
                                           long double maxv) {
  if (isnan(v) || isinf(v) || v == 0) return v;
  int e;
  frexpl(v, &e); /* |v| in [2^(e-1), 2^e) */
  int top = e - 1 < emin ? emin : e - 1;
  int qe = top - (p - 1); /* exponent of one unit in the last place */
  long double r = ldexpl(rintl(ldexpl(v, -qe)), qe);
  if (fabsl(r) > maxv) r = copysignl(INFINITY, v);
  return r;
}

/* v rounded to float dtype dt (returned exactly as long double). */
static inline long double ref_round(rf_dtype dt, long double v) {
  switch (dt) {
    case RF_FLOAT16: return ref_round_format(v, 11, -14, 65504.0L);
    case RF_BFLOAT16: return ref_round_format(v, 8, -126, ldexpl(255.0L, 120));
    case RF_FLOAT32: return ref_round_format(v, 24, -126, FLT_MAX);
    case RF_FLOAT64: return ref_round_format(v, 53, -1022, DBL_MAX);
    default: return v;
  }
}

static inline int ref_int_bits(rf_dtype dt) {
  switch (dt) {
    case RF_INT8:
    case RF_UINT8: return 8;
    case RF_INT32: return 32;
    default: return 64;
  }
}

/* v reduced modulo 2^bits into dt's range (two's complement). */
static inline int64_t ref_wrap(rf_dtype dt, __int128 v) {
  int bits = ref_int_bits(dt);
  unsigned __int128 m = (unsigned __int128)v;
  if (bits < 64)
    m &= ((unsigned __int128)1 << bits) - 1;
  else
    m &= (unsigned __int128)UINT64_MAX;
  if (dt == RF_UINT8) return (int64_t)m;
  unsigned __int128 half = (unsigned __int128)1 << (bits - 1);
  if (m >= half) return (int64_t)((__int128)m - ((__int128)1 << bits));
  return (int64_t)m;
}

static inline int64_t ref_int_min(rf_dtype dt) {
  switch (dt) {
    case RF_INT8: return INT8_MIN;
    case RF_UINT8: return 0;
    case RF_INT32: return INT32_MIN;
    default: return INT64_MIN;
  }
}

static inline int64_t ref_int_max(rf_dtype dt) {
  switch (dt) {
    case RF_INT8: return INT8_MAX;
    case RF_UINT8: return UINT8_MAX;
    case RF_INT32: return INT32_MAX;
    default: return INT64_MAX;
  }
}

/* The index into x (broadcast to out) of out's flat element `flat`. */
static inline int64_t ref_bcast_index(const rf_shape *x, const rf_shape *out,
                                      int64_t flat) {
  int64_t idx = 0, stride = 1;
  for (int i = out->rank - 1; i >= 0; i--) {
    int64_t o = flat % out->dims[i];
    flat /= out->dims[i];
    int k = x->rank - out->rank + i;
    if (k < 0) continue;
    if (x->dims[k] != 1) idx += o * stride;
    stride *= x->dims[k];
  }
  return idx;
}

/* The numpy broadcast of two fully defined, compatible shapes. */
static inline rf_shape ref_bcast_shape(const rf_shape *a, const rf_shape *b) {
  rf_shape r = rf_shape_scalar();
  r.rank = a->rank > b->rank ? a->rank : b->rank;
  for (int i = 0; i < r.rank; i++) {
    int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    r.dims[i] = da == 1 ? db : da;
  }
  return r;
}

/* Random values for dt over its whole range (integers) or [lo, hi). */
static inline rf_tensor *ref_random(uint64_t *rng, rf_dtype dt, rf_shape s,
                                    double lo, double hi) {
  if (rf_dtype_is_integer(dt)) {
    lo = (double)ref_int_min(dt);
    hi = (double)ref_int_max(dt) + 1.0;
  }
  return rf_test_random_tensor(rng, dt, s, lo, hi);
}

#endif
