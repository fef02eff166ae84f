/* kernels/cuda/reduction_kernels.cu - GPU kernels of Sum, Mean, ArgMax and
 * the gradient ops _SumGrad / _MeanGrad. Axes are re-checked against the
 * run-time rank with the CPU's helpers (ops/reduction_axes.h), so both
 * reject the same axes with the same message. Sums go through the
 * deterministic engine (reduce_sum.cuh); gradients broadcast dy back over
 * the reduced axes (broadcast.cuh); ArgMax returns the first index of the
 * largest value, a NaN counting as the largest (numpy's rule). */
#include "kernels/cuda/broadcast.cuh"
#include "kernels/cuda/reduce_sum.cuh"

extern "C" {
#include "ops/families.h"
#include "ops/reduction_axes.h"
}

namespace rf_gpu {
namespace {

/* Re-issues a context-free error with the node, op and device in front. */
rf_status *at_node(rf__kernel_ctx *ctx, rf_status *st) {
  if (!st || rf_status_code(st) == RF_RESOURCE_EXHAUSTED) return st;
  rf_status *e =
      rf__kernel_error(ctx, rf_status_code(st), "%s", rf_status_message(st));
  rf_status_free(st);
  return e;
}

/* Runs impl after making the device current; on error drops outputs
 * already made, so nothing half-written leaves the kernel. */
rf_status *guarded(rf__kernel_ctx *ctx, rf_status *(*impl)(rf__kernel_ctx *)) {
  rf_status *st = begin(ctx);
  if (!st) st = impl(ctx);
  if (st)
    for (int i = 0; i < ctx->num_outputs; i++) {
      rf_tensor_release(ctx->outputs[i]);
      ctx->outputs[i] = NULL;
    }
  return st;
}

rf_status *node_mask(rf__kernel_ctx *ctx, int rank, uint32_t *mask,
                     bool *keep_dims) {
  rf__reduction_attrs r;
  RF_CHECK(at_node(ctx, rf__reduction_attrs_read(&ctx->node->attrs, &r)));
  RF_CHECK(at_node(ctx, rf__reduction_mask(&r, rank, mask)));
  *keep_dims = r.keep_dims;
  return NULL;
}

rf_status *numeric(rf__kernel_ctx *ctx, const rf_tensor *t) {
  if (is_numeric(t->dtype)) return NULL;
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "expected a numeric tensor, got %s",
                          rf_dtype_name(t->dtype));
}

/* ---- Sum, Mean ---- */

rf_status *reduce(rf__kernel_ctx *ctx, bool mean) {
  const rf_tensor *x = ctx->inputs[0];
  RF_CHECK(numeric(ctx, x));
  uint32_t mask;
  bool keep;
  RF_CHECK(node_mask(ctx, x->shape.rank, &mask, &keep));
  rf_shape shape = rf__reduced_shape(&x->shape, mask, keep);
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
  RF_CHECK(numeric(ctx, x));
  uint32_t mask;
  bool keep;
  RF_CHECK(node_mask(ctx, x->shape.rank, &mask, &keep));
  rf_shape want = rf__reduced_shape(&x->shape, mask, keep);
  if (!rf_shape_equal(&dy->shape, &want) || dy->dtype != x->dtype) {
    char a[96], b[96], c[96];
    rf_shape_format(&dy->shape, a, sizeof a);
    rf_shape_format(&x->shape, b, sizeof b);
    rf_shape_format(&want, c, sizeof c);
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy %s %s does not match x %s %s reduced to %s",
                            rf_dtype_name(dy->dtype), a,
                            rf_dtype_name(x->dtype), b, c);
  }
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
  int64_t axis;
  RF_CHECK(at_node(ctx, rf__attrs_get_int(&ctx->node->attrs, "axis", &axis)));
  int rank = x->shape.rank;
  if (rank == 0)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "ArgMax needs an input of rank >= 1, got a scalar");
  if (axis < -rank || axis >= rank)
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT,
        "axis %lld is out of range for an input of rank %d (valid: [%d, %d))",
        (long long)axis, rank, -rank, rank);
  if (!is_numeric(x->dtype))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "ArgMax of %s",
                            rf_dtype_name(x->dtype));
  int k = (int)(axis < 0 ? axis + rank : axis);
  rf_shape shape = rf__reduced_shape(&x->shape, 1u << k, false);
  int64_t n = x->shape.dims[k], inner = 1, outer = 1;
  for (int i = k + 1; i < rank; i++) inner *= x->shape.dims[i];
  for (int i = 0; i < k; i++) outer *= x->shape.dims[i];
  if (n == 0 && outer * inner > 0)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "ArgMax over axis %d of length 0", k);
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

const rf__kernel_def defs[] = {
    {.op = "Sum", .device_type = RF_DEVICE_GPU, .compute = sum_compute},
    {.op = "Mean", .device_type = RF_DEVICE_GPU, .compute = mean_compute},
    {.op = "ArgMax", .device_type = RF_DEVICE_GPU, .compute = argmax_compute},
    {.op = "_SumGrad",
     .device_type = RF_DEVICE_GPU,
     .compute = sum_grad_compute},
    {.op = "_MeanGrad",
     .device_type = RF_DEVICE_GPU,
     .compute = mean_grad_compute},
};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_reduction_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
