/* kernels/cpu/layer_norm.c - CPU kernels of LayerNorm and _LayerNormGrad
 * for the float dtypes: each row's mean and variance in double, outputs
 * rounded once. dgamma and dbeta sum over the rows in row order for every
 * column, so they do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "core/status.h"
#include "kernels/cpu/half.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"

typedef struct ln_args {
  rf_dtype dt;
  const void *x, *dy, *gamma, *beta; /* dy NULL: the forward pass */
  void *out;                         /* y or dx */
  void *dgamma, *dbeta;
  double eps;
  int64_t c;
  double *stats; /* grad: per row mean and 1 / sqrt(var + eps) */
} ln_args;

static void row_stats(const ln_args *a, int64_t r, double *mean, double *rstd) {
  double s = 0, v = 0;
  for (int64_t j = 0; j < a->c; j++)
    s += rf__float_load(a->dt, a->x, r * a->c + j);
  double m = s / (double)a->c;
  for (int64_t j = 0; j < a->c; j++) {
    double d = rf__float_load(a->dt, a->x, r * a->c + j) - m;
    v += d * d;
  }
  *mean = m;
  /* A row of equal values with eps 0 (C == 1 among them): xhat is 0, so y
   * is beta and dx 0, not 0 * inf. */
  double var = v / (double)a->c + a->eps;
  *rstd = var > 0 ? 1.0 / sqrt(var) : 0.0;
}

/* y, or dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
static void rows_range(void *arg, int64_t begin, int64_t end) {
  const ln_args *a = arg;
  rf_dtype dt = a->dt;
  for (int64_t r = begin; r < end; r++) {
    double m, rs;
    row_stats(a, r, &m, &rs);
    int64_t o = r * a->c;
    if (!a->dy) {
      for (int64_t j = 0; j < a->c; j++)
        rf__float_store(dt, a->out, o + j,
                        (rf__float_load(dt, a->x, o + j) - m) * rs *
                                rf__float_load(dt, a->gamma, j) +
                            rf__float_load(dt, a->beta, j));
      continue;
    }
    a->stats[2 * r] = m;
    a->stats[2 * r + 1] = rs;
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < a->c; j++) {
      double g =
          rf__float_load(dt, a->dy, o + j) * rf__float_load(dt, a->gamma, j);
      sg += g;
      sgx += g * (rf__float_load(dt, a->x, o + j) - m) * rs;
    }
    sg /= (double)a->c;
    sgx /= (double)a->c;
    for (int64_t j = 0; j < a->c; j++) {
      double g =
          rf__float_load(dt, a->dy, o + j) * rf__float_load(dt, a->gamma, j);
      double xh = (rf__float_load(dt, a->x, o + j) - m) * rs;
      rf__float_store(dt, a->out, o + j, rs * (g - sg - xh * sgx));
    }
  }
}

typedef struct col_args {
  const ln_args *a;
  int64_t rows;
} col_args;

/* dgamma[j] = sum_r dy * xhat, dbeta[j] = sum_r dy, rows in order. */
static void cols_range(void *arg, int64_t begin, int64_t end) {
  const col_args *ca = arg;
  const ln_args *a = ca->a;
  for (int64_t j = begin; j < end; j++) {
    double dg = 0, db = 0;
    for (int64_t r = 0; r < ca->rows; r++) {
      double d = rf__float_load(a->dt, a->dy, r * a->c + j);
      dg += d * (rf__float_load(a->dt, a->x, r * a->c + j) - a->stats[2 * r]) *
            a->stats[2 * r + 1];
      db += d;
    }
    rf__float_store(a->dt, a->dgamma, j, dg);
    rf__float_store(a->dt, a->dbeta, j, db);
  }
}

/* LayerNorm(x, gamma, beta) or _LayerNormGrad(dy, x, gamma). */
static rf_status *run(rf__kernel_ctx *ctx, bool grad) {
  ln_args a = {0};
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "epsilon", &a.eps));
  const rf_tensor *x = ctx->inputs[grad ? 1 : 0];
  const rf_tensor *gamma = ctx->inputs[grad ? 2 : 1];
  if (x->shape.rank < 1)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT, "x has rank 0");
  a.c = x->shape.dims[x->shape.rank - 1];
  for (int k = grad ? 2 : 1; k < 3; k++) {
    const rf_tensor *p = ctx->inputs[k];
    if (p->shape.rank != 1 || p->shape.dims[0] != a.c)
      return rf__kernel_error(
          ctx, RF_INVALID_ARGUMENT, "%s is not [C] for x's last dim C = %lld",
          k == 1 || grad ? "gamma" : "beta", (long long)a.c);
  }
  if (grad && !rf_shape_equal(&ctx->inputs[0]->shape, &x->shape))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy and x have different shapes");
  a.dt = x->dtype;
  a.x = x->data;
  a.gamma = gamma->data;
  int64_t rows = a.c ? x->num_elements / a.c : 0;
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, a.dt, &x->shape, &out));
  a.out = out->data;
  if (!grad) {
    a.beta = ctx->inputs[2]->data;
    rf__kernel_parallel_for(ctx, rows, 10 * a.c, rows_range, &a);
    return NULL;
  }
  rf_tensor *dg, *db;
  RF_CHECK(rf__kernel_alloc_output(ctx, 1, a.dt, &gamma->shape, &dg));
  RF_CHECK(rf__kernel_alloc_output(ctx, 2, a.dt, &gamma->shape, &db));
  a.dy = ctx->inputs[0]->data;
  a.dgamma = dg->data;
  a.dbeta = db->data;
  a.stats = malloc(sizeof(double) * 2 * (size_t)(rows ? rows : 1));
  if (!a.stats)
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for %lld rows' statistics",
                            (long long)rows);
  rf__kernel_parallel_for(ctx, rows, 20 * a.c, rows_range, &a);
  col_args ca = {&a, rows};
  rf__kernel_parallel_for(ctx, a.c, 6 * rows, cols_range, &ca);
  free(a.stats);
  return NULL;
}

static rf_status *layer_norm_compute(rf__kernel_ctx *ctx) {
  return run(ctx, false);
}
static rf_status *layer_norm_grad_compute(rf__kernel_ctx *ctx) {
  return run(ctx, true);
}

#define RF_LAYER_NORM_KERNELS(X)                                \
  X("LayerNorm", layer_norm_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("_LayerNormGrad", layer_norm_grad_compute, 0, 0, RF_COST_PER_ELEMENT)

static const rf__kernel_def defs[] = {RF_LAYER_NORM_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_layer_norm_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]);
}
