/* kernels/cuda/gelu.cu - GPU kernels of Gelu, _GeluGrad and _GeluSecond for
 * the float dtypes: the formulas of kernels/gelu_math.h in double, rounded
 * once to the dtype (as on the CPU), one thread per element. */
#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

#include "kernels/gelu_math.h"

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

template <typename T>
__global__ void gelu_kernel(const T *dy, const T *x, T *out, int64_t n,
                            bool approx, int which) {
  RF_GPU_LOOP(i, n) {
    double v = rf__gelu((double)Num<T>::load(x[i]), approx, which);
    if (dy) v *= (double)Num<T>::load(dy[i]);
    out[i] = Num<T>::store((typename Num<T>::C)v);
  }
}

rf_status *run(rf__kernel_ctx *ctx, int which) {
  RF_CHECK(begin(ctx));
  bool approx;
  RF_CHECK(rf__attrs_get_bool(&ctx->node->attrs, "approximate", &approx));
  const rf_tensor *x = ctx->inputs[which == 1 ? 1 : 0];
  const rf_tensor *dy = which == 1 ? ctx->inputs[0] : NULL;
  if (dy && !rf_shape_equal(&dy->shape, &x->shape))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy and x have different shapes");
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &out));
  int64_t n = x->num_elements;
  if (n == 0) return NULL;
  return visit_float(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        dy ? (const T *)dy->data : nullptr, (const T *)x->data, (T *)out->data,
        n, approx, which);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *gelu_compute(rf__kernel_ctx *ctx) { return run(ctx, 0); }
rf_status *gelu_grad_compute(rf__kernel_ctx *ctx) { return run(ctx, 1); }
rf_status *gelu_second_compute(rf__kernel_ctx *ctx) { return run(ctx, 2); }

const rf__kernel_def defs[] = {
    RF__GPU_KERNEL("Gelu", gelu_compute, 0, 0, RF_COST_PER_ELEMENT)
        RF__GPU_KERNEL("_GeluGrad", gelu_grad_compute, 0, 0,
                       RF_COST_PER_ELEMENT)
            RF__GPU_KERNEL("_GeluSecond", gelu_second_compute, 0, 0,
                           RF_COST_PER_ELEMENT)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_gelu_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
