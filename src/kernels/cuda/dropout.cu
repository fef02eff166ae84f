/* kernels/cuda/dropout.cu - Dropout on GPU devices: the same keep decisions
 * as the CPU (kernels/philox.h, keyed as kernels/dropout_prepare.h says),
 * one thread per element; output x * mask and the mask. In a captured step
 * the step's number is read from the step's slot in device memory
 * (rf__dropout_key.step_slot, written before each launch of the graph), so that
 * each replay draws its own step's mask. */
#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

#include "kernels/dropout_prepare.h"
#include "kernels/philox.h"

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

template <typename T>
__global__ void dropout_kernel(rf__dropout_key k, const T *x, T *y, T *mask,
                               int64_t n) {
  using C = typename Num<T>::C;
  int64_t step = k.step_slot ? *k.step_slot : k.step;
  RF_GPU_LOOP(i, n) {
    C m =
        rf__dropout_keep(k.seed, step, k.device, i, k.rate) ? (C)k.scale : (C)0;
    mask[i] = Num<T>::store(m);
    y[i] = Num<T>::store(m * Num<T>::load(x[i]));
  }
}

rf_status *dropout_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__dropout_key k;
  RF_CHECK(rf__dropout_prepare(ctx, &k));
  const rf_tensor *x = ctx->inputs[0];
  rf_tensor *y, *mask;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &y));
  RF_CHECK(alloc_output(ctx, 1, x->dtype, &x->shape, &mask));
  int64_t n = x->num_elements;
  if (n == 0) return NULL;

  return visit_float(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        k, (const T *)x->data, (T *)y->data, (T *)mask->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

const rf__kernel_def defs[] = {{.op = "Dropout",
                                .device_type = RF_DEVICE_GPU,
                                .compute = dropout_compute}};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_dropout_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs, 1);
}
