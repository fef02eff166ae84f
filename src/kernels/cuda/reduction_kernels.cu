/* kernels/cuda/reduction_kernels.cu - GPU kernels of Sum, Mean, ArgMax and
 * the gradient ops _SumGrad / _MeanGrad. Arguments and axes are checked
 * by the CPU kernels' code (kernels/reduction_prepare.c), so both reject
 * the same inputs with the same message. Sums go through the
 * deterministic engine (reduce_sum.cuh); gradients broadcast dy back over
 * the reduced axes (broadcast.cuh); ArgMax returns the first index of the
 * largest value, a NaN counting as the largest (numpy's rule). */
#include "kernels/cuda/broadcast.cuh"
#include "kernels/cuda/reduce_sum.cuh"
#include "kernels/reduction_prepare.h"

extern "C" {
#include "kernels/kernel_families.h"
#include "ops/reduction_axes.h" /* rf__reduced_shape */
}

namespace rf_gpu {
namespace {

/* Runs impl after making the device current; on error drops outputs
 * already made, so nothing half-written leaves the kernel. */
rf_status *guarded(rf__kernel_ctx *ctx, rf_status *(*impl)(rf__kernel_ctx *)) {
  rf_status *st = begin(ctx);
  if (!st) st = impl(ctx);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

/* ---- Sum, Mean ---- */

rf_status *reduce(rf__kernel_ctx *ctx, bool mean) {
  const rf_tensor *x = ctx->inputs[0];
  uint32_t mask;
  rf_shape shape;
  RF_CHECK(rf__reduce_prepare(ctx, &mask, &shape));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &shape, &out));
  return reduce_sum(ctx, x, mask, mean, out);
}

rf_status *sum_impl(rf__kernel_ctx *ctx) { return reduce(ctx, false); }
rf_status *mean_impl(rf__kernel_ctx *ctx) { return reduce(ctx, true); }
rf_status *sum_compute(rf__kernel_ctx *ctx) { return guarded(ctx, sum_impl); }
rf_status *mean_compute(rf__kernel_ctx *ctx) { return guarded(ctx, mean_impl); }

/* ---- _SumGrad, _MeanGrad: dx[i] = dy[kept part of i] (/ count) ---- */

struct CopyF {
  template <typename T>
  __device__ T operator()(T x, T) const {
    return x;
  }
};

/* dy / count as Mean divides: floats in double rounded once (16-bit floats
 * through float, as the CPU does), integers truncating. */
struct DivideF {
  int64_t count;
  template <typename T>
  __device__ T operator()(T x, T) const {
    if constexpr (std::is_same<T, double>::value) {
      return x / (double)count;
    } else if constexpr (is_float_v<T>) {
      return Num<T>::store((float)((double)Num<T>::load(x) / (double)count));
    } else {
      return (T)((int64_t)x / count);
    }
  }
};

rf_status *reduce_grad(rf__kernel_ctx *ctx, bool mean) {
  const rf_tensor *dy = ctx->inputs[0], *x = ctx->inputs[1];
  uint32_t mask;
  RF_CHECK(rf__reduce_grad_prepare(ctx, &mask));
  rf_tensor *dx;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &dx));
  int64_t n = dx->num_elements;
  if (n == 0) return NULL;
  int64_t count = n / dy->num_elements;
  /* dy with the reduced axes kept as 1 broadcasts straight onto x. */
  rf_shape dy_kept = rf__reduced_shape(&x->shape, mask, true);
  return visit_numeric(x->dtype, [&](auto tag) -> rf_status * {
    using T = typename decltype(tag)::type;
    if (!mean || count == 1)
      return broadcast_launch<T, T, T>(ctx, dy->data, &dy_kept, dy->data,
                                       &dy_kept, dx->data, &dx->shape, n,
                                       CopyF{});
    return broadcast_launch<T, T, T>(ctx, dy->data, &dy_kept, dy->data,
                                     &dy_kept, dx->data, &dx->shape, n,
                                     DivideF{count});
  });
}

rf_status *sum_grad_impl(rf__kernel_ctx *ctx) {
  return reduce_grad(ctx, false);
}
rf_status *mean_grad_impl(rf__kernel_ctx *ctx) {
  return reduce_grad(ctx, true);
}
rf_status *sum_grad_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, sum_grad_impl);
}
rf_status *mean_grad_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, mean_grad_impl);
}

/* ---- ArgMax over one axis: (outer, n, inner) -> (outer, inner) int64 ---- */

/* The type values compare in: float for 16-bit floats, int64 for integers
 * (warp shuffles move 4- and 8-byte values). */
template <typename T>
using Cmp =
    typename std::conditional<is_float_v<T>, typename Num<T>::C, int64_t>::type;

constexpr int64_t kNone = INT64_MAX; /* a lane that saw no element */

/* The better of two (value, index) candidates: a NaN beats any number, a
 * larger value beats a smaller, and ties go to the smaller index. This
 * picks the first NaN, else the first maximum, whatever the grouping. */
template <typename V>
__device__ __forceinline__ void better(V &v, int64_t &i, V w, int64_t j) {
  if (j == kNone) return;
  bool take;
  if (i == kNone) {
    take = true;
  } else {
    bool vn = v != v, wn = w != w;
    if (vn || wn)
      take = wn && (!vn || j < i);
    else
      take = w > v || (w == v && j < i);
  }
  if (take) {
    v = w;
    i = j;
  }
}

/* inner == 1: a warp per output; lane l scans l, l + 32, ... */
template <typename T>
__global__ void argmax_rows(const T *x, int64_t outer, int64_t n,
                            int64_t *out) {
  using V = Cmp<T>;
  int lane = threadIdx.x % 32;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t o = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
       o < outer; o += warps) {
    const T *row = x + o * n;
    V v = 0;
    int64_t i = kNone;
    for (int64_t r = lane; r < n; r += 32)
      better(v, i, (V)Num<T>::load(row[r]), r);
    for (int m = 16; m > 0; m /= 2) {
      V w = __shfl_xor_sync(~0u, v, m);
      int64_t j = __shfl_xor_sync(~0u, i, m);
      better(v, i, w, j);
    }
    if (lane == 0) out[o] = i;
  }
}

/* inner > 1: a thread per output, neighbours reading neighbours. */
template <typename T>
__global__ void argmax_cols(const T *x, int64_t outer, int64_t n, int64_t inner,
                            int64_t *out) {
  using V = Cmp<T>;
  RF_GPU_LOOP(o, outer * inner) {
    int64_t q = o / inner;
    const T *base = x + q * n * inner + (o - q * inner);
    V v = 0;
    int64_t i = kNone;
    for (int64_t r = 0; r < n; r++)
      better(v, i, (V)Num<T>::load(base[r * inner]), r);
    out[o] = i;
  }
}

rf_status *argmax_impl(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  rf__argmax_dims d;
  rf_shape shape;
  RF_CHECK(rf__argmax_prepare(ctx, &d, &shape));
  int64_t n = d.n, inner = d.inner, outer = d.outer;
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, RF_INT64, &shape, &out));
  if (out->num_elements == 0) return NULL;
  int64_t *o = (int64_t *)out->data;
  return visit_numeric(x->dtype, [&](auto tag) -> rf_status * {
    using T = typename decltype(tag)::type;
    const T *xd = (const T *)x->data;
    if (inner == 1)
      argmax_rows<T><<<grid(ctx, outer * 32), kThreads, 0, stream(ctx)>>>(
          xd, outer, n, o);
    else
      argmax_cols<T><<<grid(ctx, outer * inner), kThreads, 0, stream(ctx)>>>(
          xd, outer, n, inner, o);
    RF_GPU_LAUNCHED(ctx);
    return NULL;
  });
}

rf_status *argmax_compute(rf__kernel_ctx *ctx) {
  return guarded(ctx, argmax_impl);
}

const rf__kernel_def defs[] = {RF_REDUCTION_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_reduction_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
