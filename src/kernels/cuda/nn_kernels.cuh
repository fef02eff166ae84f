/* kernels/cuda/nn_kernels.cuh - the GPU nn kernel family is split over two
 * files; rf__register_gpu_nn_kernels (ops/families.h, in nn_kernels.cu)
 * registers both halves. */
#ifndef RF_KERNELS_CUDA_NN_KERNELS_CUH
#define RF_KERNELS_CUDA_NN_KERNELS_CUH

#include "kernels/cuda/gpu_common.cuh"

/* Relu, Sigmoid, Tanh and their gradients (activation_kernels.cu). */
rf_status *rf__register_gpu_activation_kernels(void);

#endif
