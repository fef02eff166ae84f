/* kernels/cpu/batch_norm.c - CPU kernels of BatchNorm, BatchNormInference
 * and their gradients for the float dtypes, x [R, C] (rows = every axis but
 * the last). Per-channel statistics in double, each channel summing its rows
 * in row order (so results do not depend on the thread count); outputs
 * rounded once. */
#include <math.h>
#include <stdlib.h>

#include "core/status.h"
#include "kernels/cpu/half.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"

static double load(rf_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case RF_FLOAT16: return rf__h2f(((const uint16_t *)p)[i]);
    case RF_BFLOAT16: return rf__bf2f(((const uint16_t *)p)[i]);
    case RF_FLOAT32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
  }
}

static void store(rf_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
    case RF_FLOAT16: ((uint16_t *)p)[i] = rf__f2h((float)v); break;
    case RF_BFLOAT16: ((uint16_t *)p)[i] = rf__f2bf((float)v); break;
    case RF_FLOAT32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
  }
}

typedef enum mode {
  BN_TRAIN,      /* BatchNorm(x, gamma, beta) -> y, mean, variance */
  BN_INFER,      /* BatchNormInference(x, gamma, beta, mean, variance) -> y */
  BN_TRAIN_GRAD, /* _BatchNormGrad(dy, x, gamma, dmean, dvariance) */
  BN_INFER_GRAD, /* _BatchNormInferenceGrad(dy, x, gamma, mean, variance) */
} mode;

typedef struct bn_args {
  mode m;
  rf_dtype dt;
  const void *x, *dy, *gamma, *beta, *mean, *var, *dmean, *dvar;
  void *out;               /* y or dx */
  void *o1, *o2, *o3, *o4; /* outputs 1..4 */
  double eps;
  int64_t rows, c;
  /* per channel: mean, 1 / sqrt(var + eps), sum dy, sum dy * xhat */
  double *st;
} bn_args;

/* Channel j's statistics, and the channel outputs. */
static void channels_range(void *arg, int64_t begin, int64_t end) {
  const bn_args *a = arg;
  rf_dtype dt = a->dt;
  int64_t c = a->c, R = a->rows;
  for (int64_t j = begin; j < end; j++) {
    double m, rs;
    if (a->m == BN_INFER || a->m == BN_INFER_GRAD) {
      m = load(dt, a->mean, j);
      rs = 1.0 / sqrt(load(dt, a->var, j) + a->eps);
    } else {
      double s = 0, v = 0;
      for (int64_t r = 0; r < R; r++) s += load(dt, a->x, r * c + j);
      m = s / (double)R; /* NaN for R = 0 */
      for (int64_t r = 0; r < R; r++) {
        double d = load(dt, a->x, r * c + j) - m;
        v += d * d;
      }
      v /= (double)R;
      rs = 1.0 / sqrt(v + a->eps);
      if (a->m == BN_TRAIN) {
        store(dt, a->o1, j, m);
        store(dt, a->o2, j, v);
      }
    }
    double sdy = 0, sdyx = 0;
    if (a->m == BN_TRAIN_GRAD || a->m == BN_INFER_GRAD) {
      for (int64_t r = 0; r < R; r++) {
        double d = load(dt, a->dy, r * c + j);
        sdy += d;
        sdyx += d * (load(dt, a->x, r * c + j) - m) * rs;
      }
      store(dt, a->o1, j, sdyx); /* dgamma */
      store(dt, a->o2, j, sdy);  /* dbeta */
    }
    if (a->m == BN_INFER_GRAD) {
      double gm = load(dt, a->gamma, j);
      store(dt, a->o3, j, -gm * rs * sdy);             /* dmean */
      store(dt, a->o4, j, -0.5 * gm * rs * rs * sdyx); /* dvariance */
    }
    a->st[4 * j] = m;
    a->st[4 * j + 1] = rs;
    a->st[4 * j + 2] = sdy;
    a->st[4 * j + 3] = sdyx;
  }
}

/* y, or dx: inference dy * gamma * rstd; training
 * gamma * rstd * (dy - sum(dy) / R - xhat * sum(dy * xhat) / R)
 * + dmean / R + dvariance * 2 (x - mean) / R. */
static void rows_range(void *arg, int64_t begin, int64_t end) {
  const bn_args *a = arg;
  rf_dtype dt = a->dt;
  int64_t c = a->c;
  double R = (double)a->rows;
  for (int64_t r = begin; r < end; r++)
    for (int64_t j = 0; j < c; j++) {
      const double *s = a->st + 4 * j;
      int64_t i = r * c + j;
      double xc = load(dt, a->x, i) - s[0], v;
      double gm = load(dt, a->gamma, j);
      switch (a->m) {
        case BN_TRAIN:
        case BN_INFER: v = xc * s[1] * gm + load(dt, a->beta, j); break;
        case BN_INFER_GRAD: v = load(dt, a->dy, i) * gm * s[1]; break;
        default:
          v = gm * s[1] *
                  (load(dt, a->dy, i) - s[2] / R - xc * s[1] * s[3] / R) +
              load(dt, a->dmean, j) / R + load(dt, a->dvar, j) * 2 * xc / R;
          break;
      }
      store(dt, a->out, i, v);
    }
}

/* Input k's name in the op's signature, for errors. */
static const char *input_name(mode m, int k) {
  static const char *const fwd[] = {"x", "gamma", "beta", "mean", "variance"};
  static const char *const tg[] = {"dy", "x", "gamma", "dmean", "dvariance"};
  static const char *const ig[] = {"dy", "x", "gamma", "mean", "variance"};
  return m == BN_TRAIN || m == BN_INFER ? fwd[k]
         : m == BN_TRAIN_GRAD           ? tg[k]
                                        : ig[k];
}

static rf_status *run(rf__kernel_ctx *ctx, mode m) {
  bn_args a = {.m = m};
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "epsilon", &a.eps));
  bool grad = m == BN_TRAIN_GRAD || m == BN_INFER_GRAD;
  const rf_tensor *x = ctx->inputs[grad ? 1 : 0];
  if (x->shape.rank < 2)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "x has rank %d, not >= 2 ([..., C])",
                            x->shape.rank);
  a.c = x->shape.dims[x->shape.rank - 1];
  int nin = m == BN_TRAIN ? 3 : 5;
  for (int k = grad ? 2 : 1; k < nin; k++) {
    const rf_tensor *p = ctx->inputs[k];
    if (p->shape.rank != 1 || p->shape.dims[0] != a.c)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "%s is not [C] for x's last dim C = %lld",
                              input_name(m, k), (long long)a.c);
  }
  if (grad && !rf_shape_equal(&ctx->inputs[0]->shape, &x->shape))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy and x have different shapes");
  a.dt = x->dtype;
  a.x = x->data;
  a.rows = a.c ? x->num_elements / a.c : 0;
  if (grad) {
    a.dy = ctx->inputs[0]->data;
    a.gamma = ctx->inputs[2]->data;
    if (m == BN_TRAIN_GRAD) {
      a.dmean = ctx->inputs[3]->data;
      a.dvar = ctx->inputs[4]->data;
    } else {
      a.mean = ctx->inputs[3]->data;
      a.var = ctx->inputs[4]->data;
    }
  } else {
    a.gamma = ctx->inputs[1]->data;
    a.beta = ctx->inputs[2]->data;
    if (m == BN_INFER) {
      a.mean = ctx->inputs[3]->data;
      a.var = ctx->inputs[4]->data;
    }
  }
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, a.dt, &x->shape, &out));
  a.out = out->data;
  rf_shape cs = rf_shape_of(1, a.c);
  int nout = m == BN_INFER ? 1 : m == BN_INFER_GRAD ? 5 : 3;
  void **o[4] = {&a.o1, &a.o2, &a.o3, &a.o4};
  for (int k = 1; k < nout; k++) {
    rf_tensor *t;
    RF_CHECK(rf__kernel_alloc_output(ctx, k, a.dt, &cs, &t));
    *o[k - 1] = t->data;
  }
  a.st = malloc(sizeof(double) * 4 * (size_t)(a.c ? a.c : 1));
  if (!a.st)
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for %lld channels' statistics",
                            (long long)a.c);
  rf__kernel_parallel_for(ctx, a.c, 8 * a.rows + 8, channels_range, &a);
  rf__kernel_parallel_for(ctx, a.rows, 10 * a.c, rows_range, &a);
  free(a.st);
  return NULL;
}

static rf_status *bn_compute(rf__kernel_ctx *ctx) { return run(ctx, BN_TRAIN); }
static rf_status *bn_infer_compute(rf__kernel_ctx *ctx) {
  return run(ctx, BN_INFER);
}
static rf_status *bn_grad_compute(rf__kernel_ctx *ctx) {
  return run(ctx, BN_TRAIN_GRAD);
}
static rf_status *bn_infer_grad_compute(rf__kernel_ctx *ctx) {
  return run(ctx, BN_INFER_GRAD);
}

#define RF_BATCH_NORM_KERNELS(X)                                       \
  X("BatchNorm", bn_compute, 0, 0, RF_COST_PER_ELEMENT)                \
  X("BatchNormInference", bn_infer_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("_BatchNormGrad", bn_grad_compute, 0, 0, RF_COST_PER_ELEMENT)      \
  X("_BatchNormInferenceGrad", bn_infer_grad_compute, 0, 0, RF_COST_PER_ELEMENT)

static const rf__kernel_def defs[] = {RF_BATCH_NORM_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_batch_norm_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]);
}
