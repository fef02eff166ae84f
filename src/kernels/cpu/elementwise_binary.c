/* kernels/cpu/elementwise_binary.c - Add, Sub, Mul, Div, Equal and the
 * internal _BroadcastToShapeOf on the CPU, with numpy broadcasting.
 *
 * The operands' shapes are reduced to a plan (kernels/broadcast_plan.h): size-1
 * output dims dropped and neighbouring dims merged while both operands stay
 * linear across them, so same-shape and scalar cases become one flat loop and
 * the general case a loop over rows whose inner stride is 0 or 1 for each
 * operand. Row functions have a separate loop per stride pattern so the
 * compiler vectorises each. Integer arithmetic runs in the unsigned type of the
 * same width (wraps, no undefined behaviour); float16/bfloat16 compute in float
 * and round once. */
#include <string.h>

#include "kernels/broadcast_plan.h"
#include "kernels/cpu/math_kernels.h"
#include "kernels/math_prepare.h"

/* o[i] = a[i*sa] op b[i*sb] for i < n; sa, sb are 0 or 1. */
typedef void (*row_fn)(const void *a, const void *b, void *o, int64_t n, int sa,
                       int sb);

#define ID(v) (v)
#define TO_BOOL(v) ((uint8_t)((v) != 0))

#define OP_ADD(x, y, UT) ((x) + (y))
#define OP_SUB(x, y, UT) ((x) - (y))
#define OP_MUL(x, y, UT) ((x) * (y))
#define OP_FDIV(x, y, UT) ((x) / (y))
/* Truncating division; y != 0 was checked, and x / -1 is negation in the
 * unsigned type so INT_MIN / -1 wraps instead of trapping. */
#define OP_IDIV(x, y, UT) ((y) == -1 ? (0 - (UT)(x)) : (UT)((x) / (y)))
#define OP_UDIV(x, y, UT) ((x) / (y))
#define OP_EQ(x, y, UT) ((x) == (y))

#define ROW_FN(name, T, CT, LOAD, OT, STORE, OP, UT)                    \
  static void name(const void *va, const void *vb, void *vo, int64_t n, \
                   int sa, int sb) {                                    \
    const T *restrict a = va;                                           \
    const T *restrict b = vb;                                           \
    OT *restrict o = vo;                                                \
    if (sa && sb) {                                                     \
      for (int64_t i = 0; i < n; i++) {                                 \
        CT x = LOAD(a[i]), y = LOAD(b[i]);                              \
        o[i] = STORE(OP(x, y, UT));                                     \
      }                                                                 \
    } else if (sb) {                                                    \
      const CT x = LOAD(a[0]);                                          \
      for (int64_t i = 0; i < n; i++) {                                 \
        CT y = LOAD(b[i]);                                              \
        o[i] = STORE(OP(x, y, UT));                                     \
      }                                                                 \
    } else if (sa) {                                                    \
      const CT y = LOAD(b[0]);                                          \
      for (int64_t i = 0; i < n; i++) {                                 \
        CT x = LOAD(a[i]);                                              \
        o[i] = STORE(OP(x, y, UT));                                     \
      }                                                                 \
    } else {                                                            \
      const CT x = LOAD(a[0]), y = LOAD(b[0]);                          \
      const OT v = STORE(OP(x, y, UT));                                 \
      for (int64_t i = 0; i < n; i++) o[i] = v;                         \
    }                                                                   \
  }

/* X(suffix, dtype, storage, compute, load, store) */
#define FLOAT_TYPES(X)                                      \
  X(f16, RF_FLOAT16, uint16_t, float, rf__h2f, rf__f2h)     \
  X(bf16, RF_BFLOAT16, uint16_t, float, rf__bf2f, rf__f2bf) \
  X(f32, RF_FLOAT32, float, float, ID, ID)                  \
  X(f64, RF_FLOAT64, double, double, ID, ID)

/* X(suffix, dtype, storage, unsigned of the same width, division) */
#define INT_TYPES(X)                           \
  X(i8, RF_INT8, int8_t, uint8_t, OP_IDIV)     \
  X(u8, RF_UINT8, uint8_t, uint8_t, OP_UDIV)   \
  X(i32, RF_INT32, int32_t, uint32_t, OP_IDIV) \
  X(i64, RF_INT64, int64_t, uint64_t, OP_IDIV)

#define FLOAT_ROWS(sfx, E, T, CT, LOAD, STORE)          \
  ROW_FN(add_##sfx, T, CT, LOAD, T, STORE, OP_ADD, CT)  \
  ROW_FN(sub_##sfx, T, CT, LOAD, T, STORE, OP_SUB, CT)  \
  ROW_FN(mul_##sfx, T, CT, LOAD, T, STORE, OP_MUL, CT)  \
  ROW_FN(div_##sfx, T, CT, LOAD, T, STORE, OP_FDIV, CT) \
  ROW_FN(equal_##sfx, T, CT, LOAD, uint8_t, (uint8_t), OP_EQ, CT)
FLOAT_TYPES(FLOAT_ROWS)

#define INT_ROWS(sfx, E, T, UT, DIV)                 \
  ROW_FN(add_##sfx, T, UT, (UT), T, (T), OP_ADD, UT) \
  ROW_FN(sub_##sfx, T, UT, (UT), T, (T), OP_SUB, UT) \
  ROW_FN(mul_##sfx, T, UT, (UT), T, (T), OP_MUL, UT) \
  ROW_FN(div_##sfx, T, T, ID, T, (T), DIV, UT)       \
  ROW_FN(equal_##sfx, T, T, ID, uint8_t, (uint8_t), OP_EQ, UT)
INT_TYPES(INT_ROWS)

ROW_FN(equal_bool, uint8_t, uint8_t, TO_BOOL, uint8_t, (uint8_t), OP_EQ,
       uint8_t)

typedef struct binary_op {
  const char *name;
  row_fn rows[RF_DTYPE_COUNT];
  int64_t cost; /* rough cycles per element, for parallel_for */
  bool bool_out;
  bool int_div;
} binary_op;

/* clang-format off */
#define ARITH_ENTRIES(op)                                                      \
  [RF_FLOAT16] = op##_f16, [RF_BFLOAT16] = op##_bf16,                          \
  [RF_FLOAT32] = op##_f32, [RF_FLOAT64] = op##_f64,                            \
  [RF_INT8] = op##_i8, [RF_UINT8] = op##_u8,                                   \
  [RF_INT32] = op##_i32, [RF_INT64] = op##_i64
static const binary_op add_op = {"Add", {ARITH_ENTRIES(add)}, 2, false, false};
static const binary_op sub_op = {"Sub", {ARITH_ENTRIES(sub)}, 2, false, false};
static const binary_op mul_op = {"Mul", {ARITH_ENTRIES(mul)}, 2, false, false};
static const binary_op div_op = {"Div", {ARITH_ENTRIES(div)}, 8, false, true};
static const binary_op equal_op = {
    "Equal", {ARITH_ENTRIES(equal), [RF_BOOL] = equal_bool}, 2, true, false};
/* clang-format on */

/* ---- running a broadcast plan (kernels/broadcast_plan.h) ---- */

typedef rf__broadcast_plan plan;

typedef struct binary_job {
  const plan *p;
  row_fn fn;
  const char *a, *b;
  char *o;
  size_t asize, bsize, osize; /* element sizes */
} binary_job;

static void run_flat(void *arg, int64_t begin, int64_t end) {
  const binary_job *j = arg;
  int64_t sa = j->p->sa[0], sb = j->p->sb[0];
  j->fn(j->a + (size_t)(begin * sa) * j->asize,
        j->b + (size_t)(begin * sb) * j->bsize, j->o + (size_t)begin * j->osize,
        end - begin, (int)sa, (int)sb);
}

/* Rows [begin, end) of the plan: all dims but the last. */
static void run_rows(void *arg, int64_t begin, int64_t end) {
  const binary_job *j = arg;
  const plan *p = j->p;
  int outer = p->rank - 1;
  int64_t inner = p->dims[outer], idx[RF_MAX_RANK];
  int64_t rem = begin, offa = 0, offb = 0;
  for (int i = outer - 1; i >= 0; i--) {
    idx[i] = rem % p->dims[i];
    rem /= p->dims[i];
    offa += idx[i] * p->sa[i];
    offb += idx[i] * p->sb[i];
  }
  for (int64_t r = begin; r < end; r++) {
    j->fn(j->a + (size_t)offa * j->asize, j->b + (size_t)offb * j->bsize,
          j->o + (size_t)(r * inner) * j->osize, inner, (int)p->sa[outer],
          (int)p->sb[outer]);
    for (int i = outer - 1; i >= 0; i--) { /* odometer step */
      offa += p->sa[i];
      offb += p->sb[i];
      if (++idx[i] < p->dims[i]) break;
      offa -= p->sa[i] * p->dims[i];
      offb -= p->sb[i] * p->dims[i];
      idx[i] = 0;
    }
  }
}

static bool int_has_zero(const rf_tensor *t) {
  const void *d = t->data;
  for (int64_t i = 0; i < t->num_elements; i++) {
    bool z = false;
    switch (t->dtype) {
      case RF_INT8: z = ((const int8_t *)d)[i] == 0; break;
      case RF_UINT8: z = ((const uint8_t *)d)[i] == 0; break;
      case RF_INT32: z = ((const int32_t *)d)[i] == 0; break;
      case RF_INT64: z = ((const int64_t *)d)[i] == 0; break;
      default: break;
    }
    if (z) return true;
  }
  return false;
}

/* out = fn over a and b broadcast to out's shape (non-empty). */
static void run_plan(rf__kernel_ctx *ctx, const rf_tensor *a,
                     const rf_tensor *b, rf_tensor *out, row_fn fn,
                     int64_t cost) {
  plan p;
  rf__broadcast_plan_make(&a->shape, &b->shape, &out->shape, &p);
  binary_job job = {&p,
                    fn,
                    a->data,
                    b->data,
                    out->data,
                    rf_dtype_size(a->dtype),
                    rf_dtype_size(b->dtype),
                    rf_dtype_size(out->dtype)};
  if (p.rank == 1) {
    rf__kernel_parallel_for(ctx, p.dims[0], cost, run_flat, &job);
  } else {
    int64_t rows = 1;
    for (int i = 0; i < p.rank - 1; i++) rows *= p.dims[i];
    rf__kernel_parallel_for(ctx, rows, cost * p.dims[p.rank - 1], run_rows,
                            &job);
  }
}

static rf_status *binary_compute(rf__kernel_ctx *ctx, const binary_op *op) {
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  rf_shape os;
  RF_CHECK(rf__binary_prepare(ctx, op->name, op->bool_out, &os));
  row_fn fn = op->rows[a->dtype]; /* the table has every dtype admitted */
  if (op->int_div && rf_dtype_is_integer(b->dtype) &&
      rf_shape_num_elements(&os) > 0 && int_has_zero(b))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "Integer division by zero");
  rf_dtype odt = op->bool_out ? RF_BOOL : a->dtype;
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, odt, &os, &out));
  if (out->num_elements == 0) return NULL;
  /* The 16-bit float conversions are function calls, ~8x a plain op. */
  run_plan(ctx, a, b, out, fn,
           op->cost * (rf_dtype_size(a->dtype) == 2 ? 8 : 1));
  return NULL;
}

static rf_status *add_compute(rf__kernel_ctx *c) {
  return binary_compute(c, &add_op);
}
static rf_status *sub_compute(rf__kernel_ctx *c) {
  return binary_compute(c, &sub_op);
}
static rf_status *mul_compute(rf__kernel_ctx *c) {
  return binary_compute(c, &mul_op);
}
static rf_status *div_compute(rf__kernel_ctx *c) {
  return binary_compute(c, &div_op);
}
static rf_status *equal_compute(rf__kernel_ctx *c) {
  return binary_compute(c, &equal_op);
}

/* ---- _BroadcastToShapeOf(x, like): x copied out to like's shape ---- */

#define COPY_ROW(T)                                                         \
  static void copy_##T(const void *va, const void *vb, void *vo, int64_t n, \
                       int sa, int sb) {                                    \
    const T *restrict a = va;                                               \
    T *restrict o = vo;                                                     \
    if (sa) {                                                               \
      memcpy(o, a, sizeof(T) * (size_t)n);                                  \
    } else {                                                                \
      const T v = a[0];                                                     \
      for (int64_t i = 0; i < n; i++) o[i] = v;                             \
    }                                                                       \
  }
COPY_ROW(uint8_t)
COPY_ROW(uint16_t)
COPY_ROW(uint32_t)
COPY_ROW(uint64_t)

static rf_status *broadcast_to_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0], *like = ctx->inputs[1];
  rf_shape os;
  bool done;
  RF_CHECK(rf__broadcast_to_prepare(ctx, &os, &done));
  if (done) return NULL;
  row_fn fn;
  switch (rf_dtype_size(x->dtype)) {
    case 1: fn = copy_uint8_t; break;
    case 2: fn = copy_uint16_t; break;
    case 4: fn = copy_uint32_t; break;
    default: fn = copy_uint64_t; break;
  }
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &os, &out));
  if (out->num_elements > 0) run_plan(ctx, x, like, out, fn, 1);
  return NULL;
}

static const rf__kernel_def binary_kernels[] = {
    RF_BINARY_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_binary_kernels(void) {
  return rf__kernel_register_all(
      binary_kernels, sizeof binary_kernels / sizeof binary_kernels[0]);
}
