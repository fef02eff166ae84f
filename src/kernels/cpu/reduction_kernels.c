/* kernels/cpu/reduction_kernels.c - CPU kernels of Sum, Mean, ArgMax and the
 * gradient ops _SumGrad / _MeanGrad. Axes are re-checked against the run-time
 * rank (the graph may not have known it; kernels/reduction_prepare.c). Sums
 * go through reduce_sum.c; gradients broadcast dy back over the reduced axes.
 */
#include <math.h>
#include <string.h>

#include "core/mem.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/reduce_sum.h"
#include "kernels/reduction_prepare.h"
#include "kernels/kernel_families.h"

/* Runs impl; on error, drops outputs already made so nothing half-written
 * leaves the kernel. */
static rf_status *guarded(rf__kernel_ctx *ctx,
                          rf_status *(*impl)(rf__kernel_ctx *)) {
  rf_status *st = impl(ctx);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

/* ---- Sum, Mean ---- */

static rf_status *reduce(rf__kernel_ctx *ctx, bool mean) {
  const rf_tensor *x = ctx->inputs[0];
  uint32_t mask;
  rf_shape shape;
  RF_CHECK(rf__reduce_prepare(ctx, &mask, &shape));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &shape, &out));
  return rf__cpu_reduce_sum(ctx, x, mask, mean, out);
}

static rf_status *sum_impl(rf__kernel_ctx *ctx) { return reduce(ctx, false); }
static rf_status *mean_impl(rf__kernel_ctx *ctx) { return reduce(ctx, true); }
static rf_status *sum_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, sum_impl);
}
static rf_status *mean_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, mean_impl);
}

/* ---- _SumGrad, _MeanGrad: dx[i] = dy[kept part of i] (/ count) ---- */

typedef struct bcast {
  const char *dy;
  char *dx;
  size_t es;
  rf__axis_groups g;           /* the last group is the contiguous run */
  int64_t stride[RF_MAX_RANK]; /* in dy elements; 0 for reduced groups */
} bcast;

/* dst[0..n) = one element at src, for any element size. */
static void fill(char *dst, const char *src, int64_t n, size_t es) {
  switch (es) {
    case 1: memset(dst, *src, (size_t)n); break;
    case 2: {
      uint16_t v, *d = (uint16_t *)dst;
      memcpy(&v, src, 2);
      for (int64_t i = 0; i < n; i++) d[i] = v;
      break;
    }
    case 4: {
      uint32_t v, *d = (uint32_t *)dst;
      memcpy(&v, src, 4);
      for (int64_t i = 0; i < n; i++) d[i] = v;
      break;
    }
    default: {
      uint64_t v, *d = (uint64_t *)dst;
      memcpy(&v, src, 8);
      for (int64_t i = 0; i < n; i++) d[i] = v;
    }
  }
}

/* Rows are the odometer over every group but the last; [b, e) of them. */
static void run_bcast(void *arg, int64_t b, int64_t e) {
  const bcast *p = arg;
  int n = p->g.n - 1;
  int64_t len = p->g.d[n], idx[RF_MAX_RANK], off = 0, rest = b;
  for (int k = n - 1; k >= 0; k--) {
    idx[k] = rest % p->g.d[k];
    rest /= p->g.d[k];
    off += idx[k] * p->stride[k];
  }
  for (int64_t row = b; row < e; row++) {
    char *dst = p->dx + (size_t)(row * len) * p->es;
    if (p->g.reduced[n])
      fill(dst, p->dy + (size_t)off * p->es, len, p->es);
    else
      memcpy(dst, p->dy + (size_t)off * p->es, (size_t)len * p->es);
    for (int k = n - 1; k >= 0; k--) { /* next row */
      off += p->stride[k];
      if (++idx[k] < p->g.d[k]) break;
      off -= idx[k] * p->stride[k];
      idx[k] = 0;
    }
  }
}

static void broadcast_back(rf__kernel_ctx *ctx, const void *dy, uint32_t mask,
                           rf_tensor *dx) {
  bcast p = {dy, dx->data, rf_dtype_size(dx->dtype), {0}, {0}};
  rf__axis_groups_make(&dx->shape, mask, &p.g);
  if (p.g.n == 0) { /* one element */
    memcpy(dx->data, dy, p.es);
    return;
  }
  int64_t s = p.g.reduced[p.g.n - 1] ? 1 : p.g.d[p.g.n - 1], rows = 1;
  for (int k = p.g.n - 2; k >= 0; k--) {
    p.stride[k] = p.g.reduced[k] ? 0 : s;
    if (!p.g.reduced[k]) s *= p.g.d[k];
    rows *= p.g.d[k];
  }
  rf__kernel_parallel_for(ctx, rows, p.g.d[p.g.n - 1], run_bcast, &p);
}

/* A copy of dy divided by count, as Mean divides (integers truncate). */
static rf_status *scaled_copy(const rf_tensor *dy, int64_t count, void **out) {
  void *buf = rf__malloc(dy->nbytes ? dy->nbytes : 1);
  RF_CHECK_ALLOC(buf);
  const void *s = dy->data;
  double c = (double)count;
  for (int64_t i = 0; i < dy->num_elements; i++) {
    switch (dy->dtype) {
      case RF_FLOAT16:
        ((uint16_t *)buf)[i] =
            rf__f2h((float)(rf__h2f(((const uint16_t *)s)[i]) / c));
        break;
      case RF_BFLOAT16:
        ((uint16_t *)buf)[i] =
            rf__f2bf((float)(rf__bf2f(((const uint16_t *)s)[i]) / c));
        break;
      case RF_FLOAT32:
        ((float *)buf)[i] = (float)(((const float *)s)[i] / c);
        break;
      case RF_FLOAT64: ((double *)buf)[i] = ((const double *)s)[i] / c; break;
      case RF_INT8:
        ((int8_t *)buf)[i] = (int8_t)(((const int8_t *)s)[i] / count);
        break;
      case RF_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)(((const uint8_t *)s)[i] / count);
        break;
      case RF_INT32:
        ((int32_t *)buf)[i] = (int32_t)(((const int32_t *)s)[i] / count);
        break;
      default: ((int64_t *)buf)[i] = ((const int64_t *)s)[i] / count; break;
    }
  }
  *out = buf;
  return NULL;
}

static rf_status *reduce_grad(rf__kernel_ctx *ctx, bool mean) {
  const rf_tensor *dy = ctx->inputs[0], *x = ctx->inputs[1];
  uint32_t mask;
  RF_CHECK(rf__reduce_grad_prepare(ctx, &mask));
  rf_tensor *dx;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &x->shape, &dx));
  if (dx->num_elements == 0) return NULL;
  int64_t count = x->num_elements / dy->num_elements;
  if (!mean || count == 1) {
    broadcast_back(ctx, dy->data, mask, dx);
    return NULL;
  }
  void *scaled = NULL;
  RF_CHECK(scaled_copy(dy, count, &scaled));
  broadcast_back(ctx, scaled, mask, dx);
  rf__free(scaled);
  return NULL;
}

static rf_status *sum_grad_impl(rf__kernel_ctx *ctx) {
  return reduce_grad(ctx, false);
}
static rf_status *mean_grad_impl(rf__kernel_ctx *ctx) {
  return reduce_grad(ctx, true);
}
static rf_status *sum_grad_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, sum_grad_impl);
}
static rf_status *mean_grad_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, mean_grad_impl);
}

/* ---- ArgMax over one axis: (outer, n, inner) -> (outer, inner) int64 ---- */

enum { ARG_BLOCK = 1024 }; /* columns at once; 16 KiB of stack */

typedef struct argmax {
  const void *x;
  int64_t *out;
  int64_t n, inner, nblocks;
} argmax;

/* v beats the best so far: larger, or the first NaN (NaN is the largest, as
 * in numpy); for integers the NaN tests fold away. */
#define BEATS(v, best) ((v) > (best) || ((v) != (v) && (best) == (best)))

#define LOAD_F16(p, i) rf__h2f((p)[i])
#define LOAD_BF16(p, i) rf__bf2f((p)[i])
#define LOAD_PLAIN(p, i) ((p)[i])

/* Items are (o, block of ARG_BLOCK columns), or rows when inner == 1. */
#define DEFINE_ARGMAX(NAME, T, C, LOAD)                                       \
  static void argmax_##NAME(void *arg, int64_t b, int64_t e) {                \
    const argmax *p = arg;                                                    \
    const T *x = p->x;                                                        \
    for (int64_t it = b; it < e; it++) {                                      \
      int64_t o = it / p->nblocks, j0 = (it % p->nblocks) * ARG_BLOCK;        \
      int64_t len = p->inner - j0 < ARG_BLOCK ? p->inner - j0 : ARG_BLOCK;    \
      const T *base = x + o * p->n * p->inner + j0;                           \
      C best[ARG_BLOCK];                                                      \
      int64_t idx[ARG_BLOCK];                                                 \
      for (int64_t j = 0; j < len; j++) {                                     \
        best[j] = LOAD(base, j);                                              \
        idx[j] = 0;                                                           \
      }                                                                       \
      for (int64_t r = 1; r < p->n; r++) {                                    \
        const T *row = base + r * p->inner;                                   \
        for (int64_t j = 0; j < len; j++) {                                   \
          C v = LOAD(row, j);                                                 \
          if (BEATS(v, best[j])) {                                            \
            best[j] = v;                                                      \
            idx[j] = r;                                                       \
          }                                                                   \
        }                                                                     \
      }                                                                       \
      memcpy(p->out + o * p->inner + j0, idx, (size_t)len * sizeof(int64_t)); \
    }                                                                         \
  }

DEFINE_ARGMAX(f16, uint16_t, float, LOAD_F16)
DEFINE_ARGMAX(bf16, uint16_t, float, LOAD_BF16)
DEFINE_ARGMAX(f32, float, float, LOAD_PLAIN)
DEFINE_ARGMAX(f64, double, double, LOAD_PLAIN)
DEFINE_ARGMAX(i8, int8_t, int8_t, LOAD_PLAIN)
DEFINE_ARGMAX(u8, uint8_t, uint8_t, LOAD_PLAIN)
DEFINE_ARGMAX(i32, int32_t, int32_t, LOAD_PLAIN)
DEFINE_ARGMAX(i64, int64_t, int64_t, LOAD_PLAIN)

static void (*const argmax_fns[RF_DTYPE_COUNT])(void *, int64_t, int64_t) = {
    [RF_FLOAT16] = argmax_f16, [RF_BFLOAT16] = argmax_bf16,
    [RF_FLOAT32] = argmax_f32, [RF_FLOAT64] = argmax_f64,
    [RF_INT8] = argmax_i8,     [RF_UINT8] = argmax_u8,
    [RF_INT32] = argmax_i32,   [RF_INT64] = argmax_i64,
};

static rf_status *argmax_impl(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  rf__argmax_dims d;
  rf_shape shape;
  RF_CHECK(rf__argmax_prepare(ctx, &d, &shape)); /* numeric: in argmax_fns */
  argmax p = {x->data, NULL, d.n, d.inner, 0};
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_INT64, &shape, &out));
  if (out->num_elements == 0) return NULL;
  p.out = out->data;
  p.nblocks = (p.inner + ARG_BLOCK - 1) / ARG_BLOCK;
  int64_t w = p.inner < ARG_BLOCK ? p.inner : ARG_BLOCK;
  rf__kernel_parallel_for(ctx, d.outer * p.nblocks, p.n * w,
                          argmax_fns[x->dtype], &p);
  return NULL;
}

static rf_status *argmax_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, argmax_impl);
}

/* ---- registration ---- */

static const rf__kernel_def defs[] = {RF_REDUCTION_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_reduction_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]);
}
