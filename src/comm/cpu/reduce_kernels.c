/* comm/cpu/reduce_kernels.c - typed reduction loops. Each range is processed
 * in blocks that stay in L1. The first pass writes the block of the output
 * from up to four inputs at once, ((x0 op x1) op x2) op x3, and each further
 * pass folds up to three more inputs into it, in input order, so the result
 * is the same left-to-right reduction on every device and every run, while
 * each element of the output is written once per four inputs (one pass per
 * input was ~2x slower on cache-resident buffers). Signed integer sums and
 * products wrap (computed unsigned: no UB). */
#include "comm/cpu/reduce_kernels.h"

#include <string.h>

#define BLOCK 2048

#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
#define OP_MIN(a, b) (((b) < (a) || (b) != (b)) ? (b) : (a))
#define OP_MAX(a, b) (((b) > (a) || (b) != (b)) ? (b) : (a))
/* Wrapping integer arithmetic through the unsigned type U. */
#define OP_USUM(a, b) ((elem_t)((uelem_t)(a) + (uelem_t)(b)))
#define OP_UPROD(a, b) ((elem_t)((uelem_t)(a) * (uelem_t)(b)))

/* out[s, t) = x0 op x1 [op x2 [op x3]] for m = 2, 3 or 4 inputs. */
#define FIRST_PASS(OP, m, x, out, s, t)                                     \
  do {                                                                      \
    const elem_t *restrict a0 = x[0], *restrict a1 = x[1];                  \
    if (m == 2) {                                                           \
      for (int64_t i = s; i < t; i++) out[i] = OP(a0[i], a1[i]);            \
    } else if (m == 3) {                                                    \
      const elem_t *restrict a2 = x[2];                                     \
      for (int64_t i = s; i < t; i++) out[i] = OP(OP(a0[i], a1[i]), a2[i]); \
    } else {                                                                \
      const elem_t *restrict a2 = x[2], *restrict a3 = x[3];                \
      for (int64_t i = s; i < t; i++)                                       \
        out[i] = OP(OP(OP(a0[i], a1[i]), a2[i]), a3[i]);                    \
    }                                                                       \
  } while (0)

/* out[s, t) = ((out op x0) [op x1]) [op x2] for m = 1, 2 or 3 inputs. */
#define FOLD_PASS(OP, m, x, out, s, t)                                       \
  do {                                                                       \
    const elem_t *restrict a0 = x[0];                                        \
    if (m == 1) {                                                            \
      for (int64_t i = s; i < t; i++) out[i] = OP(out[i], a0[i]);            \
    } else if (m == 2) {                                                     \
      const elem_t *restrict a1 = x[1];                                      \
      for (int64_t i = s; i < t; i++) out[i] = OP(OP(out[i], a0[i]), a1[i]); \
    } else {                                                                 \
      const elem_t *restrict a1 = x[1], *restrict a2 = x[2];                 \
      for (int64_t i = s; i < t; i++)                                        \
        out[i] = OP(OP(OP(out[i], a0[i]), a1[i]), a2[i]);                    \
    }                                                                        \
  } while (0)

/* One function per (type, op): out = reduce(ins) over [b, e). */
#define DEFINE_REDUCE(NAME, T, U, OP)                                    \
  static void NAME(const void *const *ins, int n, void *vout, int64_t b, \
                   int64_t e) {                                          \
    typedef T elem_t;                                                    \
    typedef U uelem_t;                                                   \
    (void)sizeof(elem_t), (void)sizeof(uelem_t);                         \
    T *restrict out = (T *)vout;                                         \
    const T *const *x = (const T *const *)ins;                           \
    for (int64_t s = b; s < e; s += BLOCK) {                             \
      int64_t t = s + BLOCK < e ? s + BLOCK : e;                         \
      if (n == 1) {                                                      \
        memcpy(out + s, x[0] + s, (size_t)(t - s) * sizeof(T));          \
        continue;                                                        \
      }                                                                  \
      int m = n < 4 ? n : 4;                                             \
      FIRST_PASS(OP, m, x, out, s, t);                                   \
      for (int k = m; k < n; k += 3) {                                   \
        int r = n - k < 3 ? n - k : 3;                                   \
        FOLD_PASS(OP, r, (x + k), out, s, t);                            \
      }                                                                  \
    }                                                                    \
  }

#define DEFINE_FOUR(PFX, T, U, SUM, PROD) \
  DEFINE_REDUCE(PFX##_sum, T, U, SUM)     \
  DEFINE_REDUCE(PFX##_prod, T, U, PROD)   \
  DEFINE_REDUCE(PFX##_min, T, U, OP_MIN)  \
  DEFINE_REDUCE(PFX##_max, T, U, OP_MAX)

DEFINE_FOUR(f32, float, float, OP_SUM, OP_PROD)
DEFINE_FOUR(f64, double, double, OP_SUM, OP_PROD)
DEFINE_FOUR(i8, int8_t, uint8_t, OP_USUM, OP_UPROD)
DEFINE_FOUR(u8, uint8_t, uint8_t, OP_USUM, OP_UPROD)
DEFINE_FOUR(i32, int32_t, uint32_t, OP_USUM, OP_UPROD)
DEFINE_FOUR(i64, int64_t, uint64_t, OP_USUM, OP_UPROD)

/* 16-bit floats: accumulate a block in float, round once. */
typedef float (*to_float_fn)(uint16_t);
typedef uint16_t (*from_float_fn)(float);

static void reduce16(const void *const *ins, int n, void *vout, int64_t b,
                     int64_t e, rf_reduction op, to_float_fn to,
                     from_float_fn from) {
  uint16_t *out = vout;
  float acc[BLOCK];
  for (int64_t s = b; s < e; s += BLOCK) {
    int64_t t = s + BLOCK < e ? s + BLOCK : e;
    const uint16_t *x0 = ins[0];
    for (int64_t i = s; i < t; i++) acc[i - s] = to(x0[i]);
    for (int k = 1; k < n; k++) {
      const uint16_t *xk = ins[k];
      for (int64_t i = s; i < t; i++) {
        float a = acc[i - s], v = to(xk[i]);
        switch (op) {
          case RF_REDUCE_SUM:
          case RF_REDUCE_AVG: a = a + v; break;
          case RF_REDUCE_PROD: a = a * v; break;
          case RF_REDUCE_MIN: a = OP_MIN(a, v); break;
          case RF_REDUCE_MAX: a = OP_MAX(a, v); break;
          default: break;
        }
        acc[i - s] = a;
      }
    }
    float scale = op == RF_REDUCE_AVG ? 1.0f / (float)n : 1.0f;
    for (int64_t i = s; i < t; i++)
      out[i] = from(op == RF_REDUCE_AVG ? acc[i - s] * scale : acc[i - s]);
  }
}

typedef void (*reduce_fn)(const void *const *, int, void *, int64_t, int64_t);

#define ROW(PFX) \
  { PFX##_sum, PFX##_prod, PFX##_min, PFX##_max }
/* [dtype][sum, prod, min, max]; avg = sum then divide. */
static reduce_fn table(rf_dtype d, rf_reduction op) {
  static const reduce_fn f32[] = ROW(f32), f64[] = ROW(f64), i8[] = ROW(i8),
                         u8[] = ROW(u8), i32[] = ROW(i32), i64[] = ROW(i64);
  int k = op == RF_REDUCE_AVG ? 0 : (int)op;
  if (k < 0 || k > 3) return NULL;
  switch (d) {
    case RF_FLOAT32: return f32[k];
    case RF_FLOAT64: return f64[k];
    case RF_INT8: return i8[k];
    case RF_UINT8: return u8[k];
    case RF_INT32: return i32[k];
    case RF_INT64: return i64[k];
    default: return NULL;
  }
}

bool rf__cpu_reduce_supported(rf_dtype dtype, rf_reduction op) {
  if ((int)op < 0 || op >= RF__REDUCE_COUNT) return false;
  return dtype == RF_FLOAT16 || dtype == RF_BFLOAT16 || table(dtype, op);
}

#define DIVIDE(T, out, b, e, n)                                 \
  do {                                                          \
    T *o = (T *)(out);                                          \
    for (int64_t i = (b); i < (e); i++) o[i] = (T)(o[i] / (n)); \
  } while (0)

#define SCALE(T, out, b, e, r)                                  \
  do {                                                          \
    T *o = (T *)(out);                                          \
    for (int64_t i = (b); i < (e); i++) o[i] = (T)(o[i] * (r)); \
  } while (0)

bool rf__cpu_reduce(rf_dtype dtype, rf_reduction op, const void *const *ins,
                    int n, void *out, int64_t begin, int64_t end) {
  if (dtype == RF_FLOAT16) {
    reduce16(ins, n, out, begin, end, op, rf_half_to_float, rf_float_to_half);
    return true;
  }
  if (dtype == RF_BFLOAT16) {
    reduce16(ins, n, out, begin, end, op, rf_bfloat16_to_float,
             rf_float_to_bfloat16);
    return true;
  }
  reduce_fn f = table(dtype, op);
  if (!f) return false;
  f(ins, n, out, begin, end);
  if (op != RF_REDUCE_AVG || n == 1) return true;
  /* x / 2^k == x * 2^-k exactly (both are x/2^k correctly rounded), and a
   * multiplication is several times cheaper than a division per element. */
  bool pow2 = (n & (n - 1)) == 0;
  switch (dtype) {
    case RF_FLOAT32:
      if (pow2)
        SCALE(float, out, begin, end, 1.0f / (float)n);
      else
        DIVIDE(float, out, begin, end, (float)n);
      break;
    case RF_FLOAT64:
      if (pow2)
        SCALE(double, out, begin, end, 1.0 / (double)n);
      else
        DIVIDE(double, out, begin, end, (double)n);
      break;
    case RF_INT8: DIVIDE(int8_t, out, begin, end, n); break;
    case RF_UINT8: DIVIDE(uint8_t, out, begin, end, n); break;
    case RF_INT32: DIVIDE(int32_t, out, begin, end, n); break;
    case RF_INT64: DIVIDE(int64_t, out, begin, end, (int64_t)n); break;
    default: return false;
  }
  return true;
}
