/* kernels/cpu/nn_kernels.c - CPU kernels of BiasAdd, Softmax,
 * SparseSoftmaxCrossEntropyWithLogits and their gradient ops; registers the
 * whole nn family (the activations live in activation_kernels.c).
 *
 * Every op here works on rows of the last axis. Softmax and cross-entropy
 * subtract the row maximum before exp (no overflow) and add exps in double.
 * float16 / bfloat16 compute in float; their exps are recomputed instead of
 * being stored rounded. Labels are all checked before anything is computed. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/half.h"
#include "kernels/cpu/nn_kernels.h"
#include "kernels/cpu/reduce_sum.h"
#include "kernels/kernel.h"
#include "kernels/nn_prepare.h"
#include "kernels/kernel_families.h"

#define LOAD_F16(p, i) rf__h2f((p)[i])
#define LOAD_BF16(p, i) rf__bf2f((p)[i])
#define LOAD_PLAIN(p, i) ((p)[i])
#define STORE_F16(p, i, v) ((p)[i] = rf__f2h(v))
#define STORE_BF16(p, i, v) ((p)[i] = rf__f2bf(v))
#define STORE_PLAIN(p, i, v) ((p)[i] = (v))

/* Row functions per dtype. T: storage, C: compute type, EXACT: T == C, so
 * exps may be stored in the output and scaled afterwards.
 *   bias:    y = x + bias
 *   softmax: y = exp(x - max) / sum
 *   smgrad:  out = (dy - sum(dy * y)) * y
 *   xent:    loss = log(sum) - (x[label] - max); bp = softmax - onehot(label)
 *   xgrad:   out = bp * dloss
 *   xboth:   xent with out for bp, then xgrad in place: the fused node's
 *            loss and gradient, rounded as the two ops round */
#define DEFINE_ROWS(NAME, T, C, LOAD, STORE, EXP, EXACT)                       \
  static void bias_##NAME(const T *x, const T *bias, T *y, int64_t c) {        \
    for (int64_t j = 0; j < c; j++) STORE(y, j, LOAD(x, j) + LOAD(bias, j));   \
  }                                                                            \
  static C rowmax_##NAME(const T *x, int64_t c) {                              \
    C m = LOAD(x, 0);                                                          \
    for (int64_t j = 1; j < c; j++) {                                          \
      C v = LOAD(x, j);                                                        \
      m = v > m ? v : m;                                                       \
    }                                                                          \
    return m;                                                                  \
  }                                                                            \
  /* Sum of exp(x - m); stored into e when EXACT. */                           \
  static double sumexp_##NAME(const T *x, C m, T *e, int64_t c) {              \
    double s = 0;                                                              \
    for (int64_t j = 0; j < c; j++) {                                          \
      C v = EXP(LOAD(x, j) - m);                                               \
      if (EXACT) STORE(e, j, v);                                               \
      s += v;                                                                  \
    }                                                                          \
    return s;                                                                  \
  }                                                                            \
  static void softmax_##NAME(const T *x, T *y, int64_t c) {                    \
    C m = rowmax_##NAME(x, c);                                                 \
    C inv = (C)(1.0 / sumexp_##NAME(x, m, y, c));                              \
    for (int64_t j = 0; j < c; j++)                                            \
      STORE(y, j, (EXACT ? LOAD(y, j) : EXP(LOAD(x, j) - m)) * inv);           \
  }                                                                            \
  static void smgrad_##NAME(const T *dy, const T *y, T *out, int64_t c) {      \
    double s = 0;                                                              \
    for (int64_t j = 0; j < c; j++) s += (double)LOAD(dy, j) * LOAD(y, j);     \
    for (int64_t j = 0; j < c; j++)                                            \
      STORE(out, j, (C)((LOAD(dy, j) - (C)s) * LOAD(y, j)));                   \
  }                                                                            \
  static void xent_##NAME(const T *x, int64_t label, T *loss, T *bp,           \
                          int64_t c) {                                         \
    C m = rowmax_##NAME(x, c);                                                 \
    double s = sumexp_##NAME(x, m, bp, c);                                     \
    STORE(loss, 0, (C)(log(s) - (double)(LOAD(x, label) - m)));                \
    C inv = (C)(1.0 / s);                                                      \
    for (int64_t j = 0; j < c; j++) {                                          \
      C p = (EXACT ? LOAD(bp, j) : EXP(LOAD(x, j) - m)) * inv;                 \
      STORE(bp, j, j == label ? p - (C)1 : p);                                 \
    }                                                                          \
  }                                                                            \
  static void xgrad_##NAME(const T *bp, const T *dloss, T *out, int64_t c) {   \
    C d = LOAD(dloss, 0);                                                      \
    for (int64_t j = 0; j < c; j++) STORE(out, j, LOAD(bp, j) * d);            \
  }                                                                            \
  static void xboth_##NAME(const T *x, int64_t label, const T *dloss, T *loss, \
                           T *out, int64_t c) {                                \
    xent_##NAME(x, label, loss, out, c);                                       \
    xgrad_##NAME(out, dloss, out, c);                                          \
  }

DEFINE_ROWS(f16, uint16_t, float, LOAD_F16, STORE_F16, expf, 0)
DEFINE_ROWS(bf16, uint16_t, float, LOAD_BF16, STORE_BF16, expf, 0)
DEFINE_ROWS(f32, float, float, LOAD_PLAIN, STORE_PLAIN, expf, 1)
DEFINE_ROWS(f64, double, double, LOAD_PLAIN, STORE_PLAIN, exp, 1)

/* Calls FN_<dtype>(args) for a float dtype; pointer args are void *. */
#define DISPATCH(dt, FN, ...)                          \
  do {                                                 \
    switch (dt) {                                      \
      case RF_FLOAT16: FN##_f16(__VA_ARGS__); break;   \
      case RF_BFLOAT16: FN##_bf16(__VA_ARGS__); break; \
      case RF_FLOAT32: FN##_f32(__VA_ARGS__); break;   \
      default: FN##_f64(__VA_ARGS__); break;           \
    }                                                  \
  } while (0)

/* Rows of c elements of one float dtype; what a, b, y, y2 hold depends on
 * the op (see each runner). */
typedef struct rows {
  rf_dtype dtype;
  size_t es;
  int64_t c;
  const char *a, *b;
  char *y, *y2;
  const void *labels;
  bool labels64;
} rows;

static const void *crow(const rows *p, const char *base, int64_t r) {
  return base + (size_t)(r * p->c) * p->es;
}

static void *row(const rows *p, char *base, int64_t r) {
  return base + (size_t)(r * p->c) * p->es;
}

static int64_t label_at(const void *labels, bool is64, int64_t i) {
  return is64 ? ((const int64_t *)labels)[i] : ((const int32_t *)labels)[i];
}

/* a: x, b: bias, y: output. */
static void run_bias(void *arg, int64_t b, int64_t e) {
  const rows *p = arg;
  for (int64_t r = b; r < e; r++)
    DISPATCH(p->dtype, bias, crow(p, p->a, r), (const void *)p->b,
             row(p, p->y, r), p->c);
}

/* a: logits, y: softmax. */
static void run_softmax(void *arg, int64_t b, int64_t e) {
  const rows *p = arg;
  for (int64_t r = b; r < e; r++)
    DISPATCH(p->dtype, softmax, crow(p, p->a, r), row(p, p->y, r), p->c);
}

/* a: dy, b: softmax, y: output. */
static void run_smgrad(void *arg, int64_t b, int64_t e) {
  const rows *p = arg;
  for (int64_t r = b; r < e; r++)
    DISPATCH(p->dtype, smgrad, crow(p, p->a, r), crow(p, p->b, r),
             row(p, p->y, r), p->c);
}

/* a: logits, y: loss (one element a row), y2: backprop. */
static void run_xent(void *arg, int64_t b, int64_t e) {
  const rows *p = arg;
  for (int64_t r = b; r < e; r++)
    DISPATCH(p->dtype, xent, crow(p, p->a, r),
             label_at(p->labels, p->labels64, r),
             (void *)(p->y + (size_t)r * p->es), row(p, p->y2, r), p->c);
}

/* a: logits, b: dloss (one element a row), y: loss (one element a row),
 * y2: gradient. */
static void run_xboth(void *arg, int64_t b, int64_t e) {
  const rows *p = arg;
  for (int64_t r = b; r < e; r++)
    DISPATCH(p->dtype, xboth, crow(p, p->a, r),
             label_at(p->labels, p->labels64, r),
             (const void *)(p->b + (size_t)r * p->es),
             (void *)(p->y + (size_t)r * p->es), row(p, p->y2, r), p->c);
}

/* a: backprop, b: dloss (one element a row), y: output. */
static void run_xgrad(void *arg, int64_t b, int64_t e) {
  const rows *p = arg;
  for (int64_t r = b; r < e; r++)
    DISPATCH(p->dtype, xgrad, crow(p, p->a, r),
             (const void *)(p->b + (size_t)r * p->es), row(p, p->y, r), p->c);
}

/* ---- kernels ---- */

/* Runs fn over the rows of p (c elements each, n elements in all). */
static void for_rows(rf__kernel_ctx *ctx, rows *p, int64_t n, int64_t cost,
                     void (*fn)(void *, int64_t, int64_t)) {
  if (p->c == 0 || n == 0) return;
  rf__kernel_parallel_for(ctx, n / p->c, p->c * cost, fn, p);
}

static rf_status *bias_add_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0], *bias = ctx->inputs[1];
  int64_t c;
  RF_CHECK(rf__bias_add_prepare(ctx, &c));
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &x->shape, &y));
  rows p = {x->dtype,   rf_dtype_size(x->dtype),
            c,          x->data,
            bias->data, y->data,
            NULL,       NULL,
            false};
  for_rows(ctx, &p, x->num_elements, 1, run_bias);
  return NULL;
}

static rf_status *bias_add_grad_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *dy = ctx->inputs[0];
  rf_shape shape;
  uint32_t mask;
  RF_CHECK(rf__bias_add_grad_prepare(ctx, &shape, &mask));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, dy->dtype, &shape, &out));
  rf_status *st = rf__cpu_reduce_sum(ctx, dy, mask, false, out);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

static rf_status *softmax_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  int64_t c;
  RF_CHECK(rf__softmax_prepare(ctx, &c));
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &x->shape, &y));
  rows p = {
      x->dtype, rf_dtype_size(x->dtype), c, x->data, NULL, y->data, NULL, NULL,
      false};
  for_rows(ctx, &p, x->num_elements, 20, run_softmax);
  return NULL;
}

static rf_status *softmax_grad_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *dy = ctx->inputs[0], *y = ctx->inputs[1];
  int64_t c;
  RF_CHECK(rf__softmax_grad_prepare(ctx, &c));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, y->dtype, &y->shape, &out));
  rows p = {y->dtype, rf_dtype_size(y->dtype),
            c,        dy->data,
            y->data,  out->data,
            NULL,     NULL,
            false};
  for_rows(ctx, &p, y->num_elements, 4, run_smgrad);
  return NULL;
}

static rf_status *check_labels(rf__kernel_ctx *ctx, const rf_tensor *labels,
                               int64_t classes) {
  bool is64 = labels->dtype == RF_INT64;
  for (int64_t i = 0; i < labels->num_elements; i++) {
    int64_t l = label_at(labels->data, is64, i);
    if (l < 0 || l >= classes)
      return rf__kernel_error(
          ctx, RF_INVALID_ARGUMENT,
          "label value %lld at labels[%lld] is outside the valid range of "
          "classes [0, %lld)",
          (long long)l, (long long)i, (long long)classes);
  }
  return NULL;
}

/* The cross-entropy's loss and second output (the backprop, or with dloss
 * its product with dloss: _SparseXentWithGrad). */
static rf_status *xent_run(rf__kernel_ctx *ctx, const rf_tensor *dloss,
                           const rf_shape *bshape, int64_t c) {
  const rf_tensor *x = ctx->inputs[0], *labels = ctx->inputs[1];
  RF_CHECK(check_labels(ctx, labels, c));
  rf_tensor *loss, *bp;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, bshape, &loss));
  rf_status *st = rf__kernel_alloc_output(ctx, 1, x->dtype, &x->shape, &bp);
  if (st) {
    rf_tensor_release(loss);
    ctx->outputs[0] = NULL;
    return st;
  }
  rows p = {x->dtype,
            rf_dtype_size(x->dtype),
            c,
            x->data,
            dloss ? dloss->data : NULL,
            loss->data,
            bp->data,
            labels->data,
            labels->dtype == RF_INT64};
  for_rows(ctx, &p, x->num_elements, 20, dloss ? run_xboth : run_xent);
  return NULL;
}

static rf_status *xent_compute(rf__kernel_ctx *ctx) {
  rf_shape bshape;
  int64_t c;
  RF_CHECK(rf__xent_prepare(ctx, &bshape, &c));
  return xent_run(ctx, NULL, &bshape, c);
}

static rf_status *xent_with_grad_compute(rf__kernel_ctx *ctx) {
  rf_shape bshape;
  int64_t c;
  RF_CHECK(rf__xent_with_grad_prepare(ctx, &bshape, &c));
  return xent_run(ctx, ctx->inputs[2], &bshape, c);
}

static rf_status *xent_grad_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *dloss = ctx->inputs[0], *bp = ctx->inputs[1];
  int64_t c;
  RF_CHECK(rf__xent_grad_prepare(ctx, &c));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, bp->dtype, &bp->shape, &out));
  rows p = {bp->dtype,   rf_dtype_size(bp->dtype),
            c,           bp->data,
            dloss->data, out->data,
            NULL,        NULL,
            false};
  for_rows(ctx, &p, bp->num_elements, 1, run_xgrad);
  return NULL;
}

/* ---- registration ---- */

static const rf__kernel_def defs[] = {RF_NN_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_nn_kernels(void) {
  RF_CHECK(rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]));
  return rf__register_cpu_activation_kernels();
}
