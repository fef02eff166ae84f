/* kernels/cuda/layer_norm.cu - GPU kernels of LayerNorm and _LayerNormGrad
 * for the float dtypes: one warp per row, the row's mean and variance in
 * double (as on the CPU) with a fixed lane split and shuffle order, outputs
 * rounded once; dgamma and dbeta one thread per column, summing the rows in
 * row order. No atomics: every result is deterministic. */
#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

__device__ __forceinline__ double warp_sum(double v) {
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(~0u, v, m);
  return v;
}

/* Rows w of a warp-per-row kernel: the loop body sees w and the lane. */
#define RF_LN_WARP_ROWS(w, lane, rows)                                    \
  const int lane = threadIdx.x % 32;                                      \
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, \
               w##_step = (int64_t)gridDim.x * (blockDim.x / 32);         \
       w < (rows); w += w##_step)

template <typename T>
__device__ __forceinline__ double ld(const T *p, int64_t i) {
  return (double)Num<T>::load(p[i]);
}

template <typename T>
__device__ __forceinline__ void row_stats(const T *xr, int64_t c, int lane,
                                          double *mean, double *rstd,
                                          double eps) {
  double s = 0;
  for (int64_t j = lane; j < c; j += 32) s += ld(xr, j);
  double m = warp_sum(s) / (double)c, v = 0;
  for (int64_t j = lane; j < c; j += 32) {
    double d = ld(xr, j) - m;
    v += d * d;
  }
  *mean = m;
  /* equal values with eps 0: xhat 0 (y = beta, dx 0), as on the CPU */
  double var = warp_sum(v) / (double)c + eps;
  *rstd = var > 0 ? 1.0 / sqrt(var) : 0.0;
}

template <typename T>
__device__ __forceinline__ T st(double v) {
  return Num<T>::store((typename Num<T>::C)v);
}

template <typename T>
__global__ void ln_kernel(const T *x, const T *gamma, const T *beta, T *y,
                          int64_t rows, int64_t c, double eps) {
  RF_LN_WARP_ROWS(w, lane, rows) {
    const T *xr = x + w * c;
    double m, rs;
    row_stats(xr, c, lane, &m, &rs, eps);
    for (int64_t j = lane; j < c; j += 32)
      y[w * c + j] = st<T>((ld(xr, j) - m) * rs * ld(gamma, j) + ld(beta, j));
  }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; the
 * row's mean and rstd go to stats for the column sums. */
template <typename T>
__global__ void ln_grad_kernel(const T *dy, const T *x, const T *gamma, T *dx,
                               double *stats, int64_t rows, int64_t c,
                               double eps) {
  RF_LN_WARP_ROWS(w, lane, rows) {
    const T *xr = x + w * c, *dr = dy + w * c;
    double m, rs;
    row_stats(xr, c, lane, &m, &rs, eps);
    double sg = 0, sgx = 0;
    for (int64_t j = lane; j < c; j += 32) {
      double g = ld(dr, j) * ld(gamma, j);
      sg += g;
      sgx += g * (ld(xr, j) - m) * rs;
    }
    sg = warp_sum(sg) / (double)c;
    sgx = warp_sum(sgx) / (double)c;
    for (int64_t j = lane; j < c; j += 32) {
      double g = ld(dr, j) * ld(gamma, j);
      dx[w * c + j] = st<T>(rs * (g - sg - (ld(xr, j) - m) * rs * sgx));
    }
    if (lane == 0) {
      stats[2 * w] = m;
      stats[2 * w + 1] = rs;
    }
  }
}

/* dgamma[j] = sum_r dy * xhat, dbeta[j] = sum_r dy, rows in order. */
template <typename T>
__global__ void ln_cols_kernel(const T *dy, const T *x, const double *stats,
                               T *dgamma, T *dbeta, int64_t rows, int64_t c) {
  RF_GPU_LOOP(j, c) {
    double dg = 0, db = 0;
    for (int64_t r = 0; r < rows; r++) {
      double d = ld(dy, r * c + j);
      dg += d * (ld(x, r * c + j) - stats[2 * r]) * stats[2 * r + 1];
      db += d;
    }
    dgamma[j] = st<T>(dg);
    dbeta[j] = st<T>(db);
  }
}

/* LayerNorm(x, gamma, beta) or _LayerNormGrad(dy, x, gamma). */
rf_status *run(rf__kernel_ctx *ctx, bool grad) {
  RF_CHECK(begin(ctx));
  double eps;
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "epsilon", &eps));
  const rf_tensor *x = ctx->inputs[grad ? 1 : 0];
  const rf_tensor *gamma = ctx->inputs[grad ? 2 : 1];
  if (x->shape.rank < 1)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT, "x has rank 0");
  int64_t c = x->shape.dims[x->shape.rank - 1];
  for (int k = grad ? 2 : 1; k < 3; k++) {
    const rf_tensor *p = ctx->inputs[k];
    if (p->shape.rank != 1 || p->shape.dims[0] != c)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "%s is not [C] for x's last dim C = %lld",
                              k == 1 || grad ? "gamma" : "beta", (long long)c);
  }
  if (grad && !rf_shape_equal(&ctx->inputs[0]->shape, &x->shape))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy and x have different shapes");
  int64_t rows = c ? x->num_elements / c : 0;
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &out));
  if (!grad) {
    if (rows == 0) return NULL;
    return visit_float(x->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      ln_kernel<T><<<grid(ctx, rows * 32), kThreads, 0, stream(ctx)>>>(
          (const T *)x->data, (const T *)gamma->data,
          (const T *)ctx->inputs[2]->data, (T *)out->data, rows, c, eps);
      RF_GPU_LAUNCHED(ctx);
      return (rf_status *)NULL;
    });
  }
  rf_tensor *dg, *db, *stats;
  RF_CHECK(alloc_output(ctx, 1, x->dtype, &gamma->shape, &dg));
  RF_CHECK(alloc_output(ctx, 2, x->dtype, &gamma->shape, &db));
  if (c == 0) return NULL;
  rf_shape ss = rf_shape_of(1, 2 * (rows ? rows : 1));
  RF_CHECK(new_tensor(ctx, RF_FLOAT64, &ss, &stats));
  rf_status *st = visit_float(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *dyp = (const T *)ctx->inputs[0]->data, *xp = (const T *)x->data;
    if (rows > 0) {
      ln_grad_kernel<T><<<grid(ctx, rows * 32), kThreads, 0, stream(ctx)>>>(
          dyp, xp, (const T *)gamma->data, (T *)out->data,
          (double *)stats->data, rows, c, eps);
      RF_GPU_LAUNCHED(ctx);
    }
    ln_cols_kernel<T><<<grid(ctx, c), kThreads, 0, stream(ctx)>>>(
        dyp, xp, (const double *)stats->data, (T *)dg->data, (T *)db->data,
        rows, c);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
  rf_tensor_release(stats); /* safe once enqueued: gpu_common.cuh */
  return st;
}

rf_status *layer_norm_compute(rf__kernel_ctx *ctx) { return run(ctx, false); }
rf_status *layer_norm_grad_compute(rf__kernel_ctx *ctx) {
  return run(ctx, true);
}

const rf__kernel_def defs[] = {
    RF__GPU_KERNEL("LayerNorm", layer_norm_compute, 0, 0, RF_COST_PER_ELEMENT)
        RF__GPU_KERNEL("_LayerNormGrad", layer_norm_grad_compute, 0, 0,
                       RF_COST_PER_ELEMENT)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_layer_norm_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
