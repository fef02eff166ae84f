/* kernels/cuda/nn_kernels.cu - GPU kernels of BiasAdd, Softmax,
 * SparseSoftmaxCrossEntropyWithLogits and their gradient ops; registers the
 * whole nn family (the activations live in activation_kernels.cu).
 *
 * Every op here works on rows of the last axis, with the CPU kernels'
 * formulas (kernels/cpu/nn_kernels.c): softmax and cross-entropy subtract
 * the row maximum before exp and add the exps in double; float16/bfloat16
 * compute in float. A warp handles a row (lane l takes l, l + 32, ...) and
 * adds its lanes with a fixed xor butterfly, so results are deterministic.
 *
 * One difference, as in TensorFlow's GPU kernel: a label outside [0, c) is
 * not an error on the GPU (checking would need a device-to-host copy and a
 * wait); that row's loss and backprop are NaN. */
#include "kernels/cuda/nn_kernels.cuh"
#include "kernels/cuda/reduce_sum.cuh"
#include "kernels/nn_prepare.h"

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

/* ---- warp helpers ---- */

template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(~0u, v, m);
  return v;
}

/* Lane maxima never hold NaN (they start at -inf and only take larger
 * values), so this is symmetric and every lane gets one result. */
template <typename V>
__device__ __forceinline__ V warp_max(V v) {
  for (int m = 16; m > 0; m /= 2) {
    V w = __shfl_xor_sync(~0u, v, m);
    v = w > v ? w : v;
  }
  return v;
}

/* Rows w of a warp-per-row kernel: the loop body sees w and the lane. */
#define RF_WARP_ROWS(w, lane, rows)                                       \
  const int lane = threadIdx.x % 32;                                      \
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, \
               w##_step = (int64_t)gridDim.x * (blockDim.x / 32);         \
       w < (rows); w += w##_step)

/* Row maximum and sum of exp(x - max) (in double) of x[0, c). */
template <typename T>
__device__ __forceinline__ void row_stats(const T *x, int64_t c, int lane,
                                          typename Num<T>::C *m, double *s) {
  using C = typename Num<T>::C;
  C mx = -INFINITY;
  for (int64_t j = lane; j < c; j += 32) {
    C v = Num<T>::load(x[j]);
    mx = v > mx ? v : mx;
  }
  mx = warp_max(mx);
  double sum = 0;
  for (int64_t j = lane; j < c; j += 32)
    sum += (double)exp_c(Num<T>::load(x[j]) - mx);
  *m = mx;
  *s = warp_sum(sum);
}

/* Products and differences rounded as written (never contracted into an
 * fma), so the fused cross-entropy with its gradient rounds as the two
 * kernels it replaces do. */
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ float sub_rn(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ __forceinline__ double sub_rn(double a, double b) {
  return __dsub_rn(a, b);
}

/* ---- kernels ---- */

template <typename T>
__global__ void bias_kernel(const T *x, const T *bias, T *y, int64_t n,
                            int64_t c) {
  RF_GPU_LOOP(i, n) {
    y[i] = Num<T>::store(Num<T>::load(x[i]) + Num<T>::load(bias[i % c]));
  }
}

template <typename T>
__global__ void softmax_kernel(const T *x, T *y, int64_t rows, int64_t c) {
  using C = typename Num<T>::C;
  RF_WARP_ROWS(w, lane, rows) {
    const T *xr = x + w * c;
    T *yr = y + w * c;
    C m;
    double s;
    row_stats(xr, c, lane, &m, &s);
    C inv = (C)(1.0 / s);
    for (int64_t j = lane; j < c; j += 32)
      yr[j] = Num<T>::store(exp_c(Num<T>::load(xr[j]) - m) * inv);
  }
}

/* out = (dy - sum(dy * y)) * y */
template <typename T>
__global__ void softmax_grad_kernel(const T *dy, const T *y, T *out,
                                    int64_t rows, int64_t c) {
  using C = typename Num<T>::C;
  RF_WARP_ROWS(w, lane, rows) {
    const T *dr = dy + w * c, *yr = y + w * c;
    double s = 0;
    for (int64_t j = lane; j < c; j += 32)
      s += (double)Num<T>::load(dr[j]) * Num<T>::load(yr[j]);
    s = warp_sum(s);
    for (int64_t j = lane; j < c; j += 32)
      out[w * c + j] = Num<T>::store(
          (C)((Num<T>::load(dr[j]) - (C)s) * Num<T>::load(yr[j])));
  }
}

/* loss = log(sum) - (x[label] - max); backprop = softmax - onehot(label).
 * With dloss (_SparseXentWithGrad) the second output is backprop, rounded
 * to T, times dloss[row]: what xent_grad_kernel makes of the backprop. */
template <typename T, typename L>
__global__ void xent_kernel(const T *x, const L *labels, const T *dloss,
                            T *loss, T *bp, int64_t rows, int64_t c) {
  using C = typename Num<T>::C;
  RF_WARP_ROWS(w, lane, rows) {
    const T *xr = x + w * c;
    T *br = bp + w * c;
    int64_t label = (int64_t)labels[w];
    if (label < 0 || label >= c) { /* see the file comment */
      const C nan = (C)NAN;
      for (int64_t j = lane; j < c; j += 32) br[j] = Num<T>::store(nan);
      if (lane == 0) loss[w] = Num<T>::store(nan);
      continue;
    }
    C m;
    double s;
    row_stats(xr, c, lane, &m, &s);
    if (lane == 0)
      loss[w] =
          Num<T>::store((C)(log(s) - (double)(Num<T>::load(xr[label]) - m)));
    C inv = (C)(1.0 / s);
    for (int64_t j = lane; j < c; j += 32) {
      C p = mul_rn(exp_c(Num<T>::load(xr[j]) - m), inv);
      T b = Num<T>::store(j == label ? sub_rn(p, (C)1) : p);
      br[j] =
          dloss ? Num<T>::store(mul_rn(Num<T>::load(b), Num<T>::load(dloss[w])))
                : b;
    }
  }
}

/* out = backprop * dloss[row] */
template <typename T>
__global__ void xent_grad_kernel(const T *bp, const T *dloss, T *out, int64_t n,
                                 int64_t c) {
  RF_GPU_LOOP(i, n) {
    out[i] =
        Num<T>::store(mul_rn(Num<T>::load(bp[i]), Num<T>::load(dloss[i / c])));
  }
}

#define RF_LAUNCHED_OK  \
  RF_GPU_LAUNCHED(ctx); \
  return (rf_status *)NULL

/* ---- compute functions ---- */

rf_status *bias_add_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0], *bias = ctx->inputs[1];
  int64_t c;
  RF_CHECK(rf__bias_add_prepare(ctx, &c));
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &y));
  int64_t n = x->num_elements;
  if (n == 0) return NULL;
  return visit_float(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        (const T *)x->data, (const T *)bias->data, (T *)y->data, n, c);
    RF_LAUNCHED_OK;
  });
}

rf_status *bias_add_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *dy = ctx->inputs[0];
  rf_shape shape;
  uint32_t mask;
  RF_CHECK(rf__bias_add_grad_prepare(ctx, &shape, &mask));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, dy->dtype, &shape, &out));
  rf_status *st = reduce_sum(ctx, dy, mask, false, out);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

rf_status *softmax_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0];
  int64_t c;
  RF_CHECK(rf__softmax_prepare(ctx, &c));
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &y));
  if (c == 0 || x->num_elements == 0) return NULL;
  int64_t rows = x->num_elements / c;
  return visit_float(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_kernel<T><<<grid(ctx, rows * 32), kThreads, 0, stream(ctx)>>>(
        (const T *)x->data, (T *)y->data, rows, c);
    RF_LAUNCHED_OK;
  });
}

rf_status *softmax_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *dy = ctx->inputs[0], *y = ctx->inputs[1];
  int64_t c;
  RF_CHECK(rf__softmax_grad_prepare(ctx, &c));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, y->dtype, &y->shape, &out));
  if (c == 0 || y->num_elements == 0) return NULL;
  int64_t rows = y->num_elements / c;
  return visit_float(y->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_grad_kernel<T><<<grid(ctx, rows * 32), kThreads, 0, stream(ctx)>>>(
        (const T *)dy->data, (const T *)y->data, (T *)out->data, rows, c);
    RF_LAUNCHED_OK;
  });
}

template <typename T, typename L>
rf_status *xent_launch(rf__kernel_ctx *ctx, const rf_tensor *x,
                       const rf_tensor *labels, const rf_tensor *dloss,
                       rf_tensor *loss, rf_tensor *bp) {
  int64_t rows = x->shape.dims[0], c = x->shape.dims[1];
  xent_kernel<T, L><<<grid(ctx, rows * 32), kThreads, 0, stream(ctx)>>>(
      (const T *)x->data, (const L *)labels->data,
      dloss ? (const T *)dloss->data : nullptr, (T *)loss->data, (T *)bp->data,
      rows, c);
  RF_LAUNCHED_OK;
}

/* The cross-entropy's loss and second output: the backprop, or with dloss
 * its product with dloss (_SparseXentWithGrad). */
rf_status *xent_run(rf__kernel_ctx *ctx, const rf_tensor *dloss,
                    const rf_shape *bshape) {
  const rf_tensor *x = ctx->inputs[0], *labels = ctx->inputs[1];
  rf_tensor *loss, *bp;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, bshape, &loss));
  rf_status *st = alloc_output(ctx, 1, x->dtype, &x->shape, &bp);
  if (!st && x->shape.dims[0] > 0) {
    bool l64 = labels->dtype == RF_INT64;
    st = visit_float(x->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return l64 ? xent_launch<T, int64_t>(ctx, x, labels, dloss, loss, bp)
                 : xent_launch<T, int32_t>(ctx, x, labels, dloss, loss, bp);
    });
  }
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

rf_status *xent_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf_shape bshape;
  int64_t c;
  RF_CHECK(rf__xent_prepare(ctx, &bshape, &c));
  return xent_run(ctx, NULL, &bshape);
}

rf_status *xent_with_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf_shape bshape;
  int64_t c;
  RF_CHECK(rf__xent_with_grad_prepare(ctx, &bshape, &c));
  return xent_run(ctx, ctx->inputs[2], &bshape);
}

rf_status *xent_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *dloss = ctx->inputs[0], *bp = ctx->inputs[1];
  int64_t c;
  RF_CHECK(rf__xent_grad_prepare(ctx, &c));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, bp->dtype, &bp->shape, &out));
  int64_t n = bp->num_elements;
  if (n == 0) return NULL;
  return visit_float(bp->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    xent_grad_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        (const T *)bp->data, (const T *)dloss->data, (T *)out->data, n, c);
    RF_LAUNCHED_OK;
  });
}

const rf__kernel_def defs[] = {RF_NN_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_nn_kernels(void) {
  RF_CHECK(rf__kernel_register_all(
      rf_gpu::defs, sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]));
  return rf__register_gpu_activation_kernels();
}
