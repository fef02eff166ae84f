/* kernels/cpu/cast.c - Cast between any two of the numeric and bool dtypes.
 *
 * Every conversion rounds once, without undefined behaviour:
 *  - float -> integer truncates toward zero and saturates; NaN gives 0;
 *  - integer -> integer wraps (two's complement), as C and TensorFlow do;
 *  - anything -> bool is x != 0 (NaN is true); bool -> anything is 0 or 1;
 *  - to float16/bfloat16 rounds to nearest even from the exact value (float64
 *    and large integers go through round-to-odd so the two-step conversion
 *    does not round twice).
 * Loads produce float (16/32-bit floats, exact), double or int64_t; each
 * destination has one store per load type, chosen with _Generic. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/math_kernels.h"

/* ---- rounding helpers ---- */

/* d rounded to float with round-to-odd: truncate, then set the last bit if
 * anything was lost. Rounding that to fewer than 23 bits (float16's 10,
 * bfloat16's 7) to nearest even then equals rounding d directly. */
static float to_float_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if (fabs((double)f) > fabs(d)) u--; /* rounded away from zero: step back */
  u |= 1;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* |v| rounded to `bits` significant bits, nearest even, as an exact double. */
static double round_u64(uint64_t v, int bits) {
  int top = 63 - __builtin_clzll(v);
  if (top < bits) return (double)v;
  int shift = top + 1 - bits;
  uint64_t q = v >> shift, rest = v & ((UINT64_C(1) << shift) - 1);
  uint64_t half = UINT64_C(1) << (shift - 1);
  if (rest > half || (rest == half && (q & 1))) q++;
  return ldexp((double)q, shift);
}

/* ---- stores: one per (destination, load type) ---- */

static uint16_t f16_from_f(float v) { return rf__f2h(v); }
static uint16_t f16_from_d(double v) { return rf__f2h(to_float_odd(v)); }
/* |v| >= 2^24 is far beyond float16's range: (float)v rounds it to a value
 * that still overflows to inf, so one rounding happens. */
static uint16_t f16_from_i(int64_t v) { return rf__f2h((float)v); }

static uint16_t bf16_from_f(float v) { return rf__f2bf(v); }
static uint16_t bf16_from_d(double v) { return rf__f2bf(to_float_odd(v)); }
static uint16_t bf16_from_i(int64_t v) {
  uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  if (m < (UINT64_C(1) << 24)) return rf__f2bf((float)v);
  double r = round_u64(m, 8); /* exact in float, so the last step is exact */
  return rf__f2bf((float)(v < 0 ? -r : r));
}

static float f32_from_f(float v) { return v; }
static float f32_from_d(double v) { return (float)v; }
static float f32_from_i(int64_t v) { return (float)v; }

static double f64_from_f(float v) { return v; }
static double f64_from_d(double v) { return v; }
static double f64_from_i(int64_t v) { return (double)v; }

/* Saturating truncation; lo and hi are exact in double. */
#define SAT_FROM_D(sfx, T, lo, hi)  \
  static T sfx##_from_d(double v) { \
    if (v != v) return 0;           \
    if (v <= (lo)) return (T)(lo);  \
    if (v >= (hi)) return (T)(hi);  \
    return (T)v;                    \
  }                                 \
  static T sfx##_from_f(float v) { return sfx##_from_d(v); }
SAT_FROM_D(i8, int8_t, -128.0, 127.0)
SAT_FROM_D(u8, uint8_t, 0.0, 255.0)
SAT_FROM_D(i32, int32_t, -2147483648.0, 2147483647.0)

/* INT64_MAX is not a double: anything >= 2^63 saturates. */
static int64_t i64_from_d(double v) {
  if (v != v) return 0;
  if (v <= -0x1p63) return INT64_MIN;
  if (v >= 0x1p63) return INT64_MAX;
  return (int64_t)v;
}
static int64_t i64_from_f(float v) { return i64_from_d(v); }

/* Integer narrowing wraps: through the unsigned type, whose conversion is
 * defined, then to the signed one (GCC and Clang define it as modular). */
static int8_t i8_from_i(int64_t v) { return (int8_t)(uint8_t)(uint64_t)v; }
static uint8_t u8_from_i(int64_t v) { return (uint8_t)(uint64_t)v; }
static int32_t i32_from_i(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }
static int64_t i64_from_i(int64_t v) { return v; }

static uint8_t b8_from_f(float v) { return v != 0; }
static uint8_t b8_from_d(double v) { return v != 0; }
static uint8_t b8_from_i(int64_t v) { return v != 0; }

/* clang-format off */
#define STORE(dst, v)                                                          \
  _Generic((v), float: dst##_from_f, double: dst##_from_d,                     \
           int64_t: dst##_from_i)(v)
/* clang-format on */

/* ---- loads ---- */

#define LOAD_f16(x) rf__h2f(x)
#define LOAD_bf16(x) rf__bf2f(x)
#define LOAD_f32(x) (x)
#define LOAD_f64(x) (x)
#define LOAD_i8(x) ((int64_t)(x))
#define LOAD_u8(x) ((int64_t)(x))
#define LOAD_i32(x) ((int64_t)(x))
#define LOAD_i64(x) (x)
#define LOAD_b8(x) ((int64_t)((x) != 0))

/* clang-format off */
/* X(suffix, dtype, storage); b8 is bool (`bool` is a macro). */
#define CAST_TYPES(X)                                                          \
  X(f16, RF_FLOAT16, uint16_t) X(bf16, RF_BFLOAT16, uint16_t)                  \
  X(f32, RF_FLOAT32, float) X(f64, RF_FLOAT64, double)                         \
  X(i8, RF_INT8, int8_t) X(u8, RF_UINT8, uint8_t)                              \
  X(i32, RF_INT32, int32_t) X(i64, RF_INT64, int64_t)                          \
  X(b8, RF_BOOL, uint8_t)

typedef void (*cast_fn)(const void *x, void *y, int64_t n);

#define CAST_FN(src, S, dst, D)                                                \
  static void cast_##src##_##dst(const void *vx, void *vy, int64_t n) {        \
    const S *restrict x = vx;                                                  \
    D *restrict y = vy;                                                        \
    for (int64_t i = 0; i < n; i++) y[i] = STORE(dst, LOAD_##src(x[i]));       \
  }

/* For one source, a function to every destination. */
#define CAST_FROM(src, SE, S)                                                  \
  CAST_FN(src, S, f16, uint16_t) CAST_FN(src, S, bf16, uint16_t)               \
  CAST_FN(src, S, f32, float) CAST_FN(src, S, f64, double)                     \
  CAST_FN(src, S, i8, int8_t) CAST_FN(src, S, u8, uint8_t)                     \
  CAST_FN(src, S, i32, int32_t) CAST_FN(src, S, i64, int64_t)                  \
  CAST_FN(src, S, b8, uint8_t)
CAST_TYPES(CAST_FROM)

#define CAST_ROW(src, SE, S)                                                   \
  [SE] = {[RF_FLOAT16] = cast_##src##_f16, [RF_BFLOAT16] = cast_##src##_bf16,  \
          [RF_FLOAT32] = cast_##src##_f32, [RF_FLOAT64] = cast_##src##_f64,    \
          [RF_INT8] = cast_##src##_i8, [RF_UINT8] = cast_##src##_u8,           \
          [RF_INT32] = cast_##src##_i32, [RF_INT64] = cast_##src##_i64,        \
          [RF_BOOL] = cast_##src##_b8},
static const cast_fn cast_fns[RF_DTYPE_COUNT][RF_DTYPE_COUNT] = {
    CAST_TYPES(CAST_ROW)};
/* clang-format on */

typedef struct cast_job {
  cast_fn fn;
  const char *x;
  char *y;
  size_t xsize, ysize;
} cast_job;

static void run_cast(void *arg, int64_t begin, int64_t end) {
  const cast_job *j = arg;
  j->fn(j->x + (size_t)begin * j->xsize, j->y + (size_t)begin * j->ysize,
        end - begin);
}

static rf_status *cast_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  rf_dtype to = ctx->node->out_dtypes[0];
  if (x->dtype == to) {
    rf__kernel_forward_input(ctx, 0, 0);
    return NULL;
  }
  cast_fn fn =
      (int)to >= 0 && to < RF_DTYPE_COUNT ? cast_fns[x->dtype][to] : NULL;
  if (!fn)
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "no Cast from %s to %s",
                            rf_dtype_name(x->dtype), rf_dtype_name(to));
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, to, &x->shape, &y));
  cast_job job = {fn, x->data, y->data, rf_dtype_size(x->dtype),
                  rf_dtype_size(to)};
  rf__kernel_parallel_for(ctx, x->num_elements, 4, run_cast, &job);
  return NULL;
}

static const rf__kernel_def cast_kernel = {.op = "Cast",
                                           .device_type = RF_DEVICE_CPU,
                                           .cost = RF_COST_PER_ELEMENT,
                                           .compute = cast_compute};

rf_status *rf__register_cpu_cast_kernels(void) {
  return rf__kernel_register(&cast_kernel);
}
