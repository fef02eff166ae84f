/* kernels/cpu/batch_norm.c - CPU kernels of BatchNorm, BatchNormInference
 * and their gradients for the float dtypes, x [R, C] (rows = every axis but
 * the last). Per-channel statistics in double: partial sums over fixed
 * chunks of rows (contiguous reads), then the chunks in order, so results do
 * not depend on the thread count; outputs rounded once. */
#include <math.h>
#include <stdlib.h>

#include "core/status.h"
#include "kernels/cpu/half.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"

/* Elements [off, off + n) as doubles, and back: one dtype switch per run
 * of elements, so the loops over them vectorize. */
static void load_run(rf_dtype dt, const void *p, int64_t off, int n,
                     double *out) {
  switch (dt) {
    case RF_FLOAT32:
      for (int i = 0; i < n; i++) out[i] = ((const float *)p)[off + i];
      break;
    case RF_FLOAT64:
      for (int i = 0; i < n; i++) out[i] = ((const double *)p)[off + i];
      break;
    default:
      for (int i = 0; i < n; i++) out[i] = rf__float_load(dt, p, off + i);
      break;
  }
}

static void store_run(rf_dtype dt, void *p, int64_t off, int n,
                      const double *v) {
  switch (dt) {
    case RF_FLOAT32:
      for (int i = 0; i < n; i++) ((float *)p)[off + i] = (float)v[i];
      break;
    case RF_FLOAT64:
      for (int i = 0; i < n; i++) ((double *)p)[off + i] = v[i];
      break;
    default:
      for (int i = 0; i < n; i++) rf__float_store(dt, p, off + i, v[i]);
      break;
  }
}

/* Channels are processed in blocks of this many (stack buffers). */
#define RF_BN_BLOCK 256

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
  /* per chunk of RF_BN_CHUNK rows: two partial sums per channel */
  double *part;
  int64_t chunks;
  int pass;
} bn_args;

/* Rows per chunk: fixed, so the sums (chunks in order, each chunk's rows
 * in order) do not depend on the thread count. Chunks of whole rows keep
 * the reads contiguous in NHWC; the GPU kernel chunks alike. */
#define RF_BN_CHUNK 64

enum { PASS_SUM, PASS_SQ, PASS_GRAD };

/* Partial sums of chunks [begin, end): x; (x - mean)^2; dy and
 * dy * xhat. */
static void chunks_range(void *arg, int64_t begin, int64_t end) {
  const bn_args *a = arg;
  int64_t c = a->c;
  double xb[RF_BN_BLOCK], db[RF_BN_BLOCK];
  for (int64_t k = begin; k < end; k++) {
    double *p = a->part + k * 2 * c;
    for (int64_t j = 0; j < 2 * c; j++) p[j] = 0;
    int64_t r1 =
        (k + 1) * RF_BN_CHUNK < a->rows ? (k + 1) * RF_BN_CHUNK : a->rows;
    for (int64_t r = k * RF_BN_CHUNK; r < r1; r++)
      for (int64_t j0 = 0; j0 < c; j0 += RF_BN_BLOCK) {
        int n = (int)(c - j0 < RF_BN_BLOCK ? c - j0 : RF_BN_BLOCK);
        const double *st = a->st + 4 * j0;
        double *p0 = p + j0, *p1 = p + c + j0;
        load_run(a->dt, a->x, r * c + j0, n, xb);
        if (a->pass == PASS_SUM) {
          for (int j = 0; j < n; j++) p0[j] += xb[j];
        } else if (a->pass == PASS_SQ) {
          for (int j = 0; j < n; j++) {
            double d = xb[j] - st[4 * j];
            p0[j] += d * d;
          }
        } else {
          load_run(a->dt, a->dy, r * c + j0, n, db);
          for (int j = 0; j < n; j++) {
            p0[j] += db[j];
            p1[j] += db[j] * (xb[j] - st[4 * j]) * st[4 * j + 1];
          }
        }
      }
  }
}

/* The pass's per-channel totals, the chunks summed in order, into
 * st[4 j + slot] (and st[4 j + slot + 1] for the second sum). */
static void run_pass(rf__kernel_ctx *ctx, bn_args *a, int pass, int slot) {
  a->pass = pass;
  rf__kernel_parallel_for(ctx, a->chunks, 8 * RF_BN_CHUNK * a->c, chunks_range,
                          a);
  for (int64_t j = 0; j < a->c; j++) {
    double s0 = 0, s1 = 0;
    for (int64_t k = 0; k < a->chunks; k++) {
      s0 += a->part[k * 2 * a->c + j];
      s1 += a->part[k * 2 * a->c + a->c + j];
    }
    a->st[4 * j + slot] = s0;
    if (pass == PASS_GRAD) a->st[4 * j + slot + 1] = s1;
  }
}

/* Every channel's statistics (st) and channel outputs. */
static void channel_stats(rf__kernel_ctx *ctx, bn_args *a) {
  rf_dtype dt = a->dt;
  int64_t c = a->c;
  double R = (double)a->rows;
  if (a->m == BN_INFER || a->m == BN_INFER_GRAD) {
    for (int64_t j = 0; j < c; j++) {
      a->st[4 * j] = rf__float_load(dt, a->mean, j);
      a->st[4 * j + 1] = 1.0 / sqrt(rf__float_load(dt, a->var, j) + a->eps);
    }
  } else {
    run_pass(ctx, a, PASS_SUM, 0);
    for (int64_t j = 0; j < c; j++) a->st[4 * j] /= R; /* NaN for R = 0 */
    run_pass(ctx, a, PASS_SQ, 1);
    for (int64_t j = 0; j < c; j++) {
      double v = a->st[4 * j + 1] / R;
      a->st[4 * j + 1] = 1.0 / sqrt(v + a->eps);
      if (a->m == BN_TRAIN) {
        rf__float_store(dt, a->o1, j, a->st[4 * j]);
        rf__float_store(dt, a->o2, j, v);
      }
    }
  }
  if (a->m == BN_TRAIN || a->m == BN_INFER) return;
  run_pass(ctx, a, PASS_GRAD, 2);
  for (int64_t j = 0; j < c; j++) {
    double rs = a->st[4 * j + 1], sdy = a->st[4 * j + 2],
           sdyx = a->st[4 * j + 3];
    rf__float_store(dt, a->o1, j, sdyx); /* dgamma */
    rf__float_store(dt, a->o2, j, sdy);  /* dbeta */
    if (a->m == BN_INFER_GRAD) {
      double gm = rf__float_load(dt, a->gamma, j);
      rf__float_store(dt, a->o3, j, -gm * rs * sdy);             /* dmean */
      rf__float_store(dt, a->o4, j, -0.5 * gm * rs * rs * sdyx); /* dvariance */
    }
  }
}

/* y, or dx: inference dy * gamma * rstd; training
 * gamma * rstd * (dy - sum(dy) / R - xhat * sum(dy * xhat) / R)
 * + dmean / R + dvariance * 2 (x - mean) / R. */
static void rows_range(void *arg, int64_t begin, int64_t end) {
  const bn_args *a = arg;
  int64_t c = a->c;
  double R = (double)a->rows;
  double xb[RF_BN_BLOCK], db[RF_BN_BLOCK], gb[RF_BN_BLOCK], bb[RF_BN_BLOCK],
      vb[RF_BN_BLOCK];
  for (int64_t j0 = 0; j0 < c; j0 += RF_BN_BLOCK) {
    int n = (int)(c - j0 < RF_BN_BLOCK ? c - j0 : RF_BN_BLOCK);
    const double *st = a->st + 4 * j0;
    load_run(a->dt, a->gamma, j0, n, gb);
    if (a->m == BN_TRAIN || a->m == BN_INFER)
      load_run(a->dt, a->beta, j0, n, bb);
    if (a->m == BN_TRAIN_GRAD) { /* bb: dmean / R, vb: 2 dvariance / R */
      load_run(a->dt, a->dmean, j0, n, bb);
      load_run(a->dt, a->dvar, j0, n, vb);
      for (int j = 0; j < n; j++) {
        bb[j] /= R;
        vb[j] *= 2 / R;
      }
    }
    for (int64_t r = begin; r < end; r++) {
      int64_t off = r * c + j0;
      load_run(a->dt, a->x, off, n, xb);
      if (a->m == BN_TRAIN_GRAD || a->m == BN_INFER_GRAD)
        load_run(a->dt, a->dy, off, n, db);
      for (int j = 0; j < n; j++) {
        const double *s = st + 4 * j;
        double xc = xb[j] - s[0];
        switch (a->m) {
          case BN_TRAIN:
          case BN_INFER: xb[j] = xc * s[1] * gb[j] + bb[j]; break;
          case BN_INFER_GRAD: xb[j] = db[j] * gb[j] * s[1]; break;
          default:
            xb[j] = gb[j] * s[1] * (db[j] - s[2] / R - xc * s[1] * s[3] / R) +
                    bb[j] + vb[j] * xc;
            break;
        }
      }
      store_run(a->dt, a->out, off, n, xb);
    }
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
  a.chunks = (a.rows + RF_BN_CHUNK - 1) / RF_BN_CHUNK;
  size_t cc = (size_t)(a.c ? a.c : 1);
  a.st = malloc(sizeof(double) * 4 * cc);
  a.part = malloc(sizeof(double) * 2 * cc * (size_t)(a.chunks ? a.chunks : 1));
  if (!a.st || !a.part) {
    free(a.st);
    free(a.part);
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for %lld channels' statistics",
                            (long long)a.c);
  }
  channel_stats(ctx, &a);
  rf__kernel_parallel_for(ctx, a.rows, 10 * a.c, rows_range, &a);
  free(a.st);
  free(a.part);
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
