/* kernels/cuda/nn_kernels.cuh - the GPU nn kernel family is split over two
 * files; rf__register_gpu_nn_kernels (kernels/kernel_families.h, in
 * nn_kernels.cu) registers both halves, which share exp_c. */
#ifndef RF_KERNELS_CUDA_NN_KERNELS_CUH
#define RF_KERNELS_CUDA_NN_KERNELS_CUH

#include "kernels/cuda/gpu_common.cuh"

/* Relu, Sigmoid, Tanh and their gradients (activation_kernels.cu). */
rf_status *rf__register_gpu_activation_kernels(void);

namespace rf_gpu {

/* exp in the compute type C: accurate expf for float (never the fast
 * intrinsic, so results match the CPU to float tolerance), exp for double. */
template <typename C>
__device__ __forceinline__ C exp_c(C v) {
  if constexpr (std::is_same<C, double>::value)
    return exp(v);
  else
    return expf(v);
}

}  // namespace rf_gpu

#endif
