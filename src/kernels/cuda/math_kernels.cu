/* kernels/cuda/math_kernels.cu - registers the GPU kernels of the math
 * family (one registration function per file, see math_kernels.cuh). */
#include "kernels/cuda/math_kernels.cuh"

extern "C" {
#include "kernels/kernel_families.h"
}

rf_status *rf__register_gpu_math_kernels(void) {
  RF_CHECK(rf__register_gpu_binary_kernels());
  RF_CHECK(rf__register_gpu_nary_kernels());
  RF_CHECK(rf__register_gpu_cast_kernels());
  RF_CHECK(rf__register_gpu_matmul_kernels());
  RF_CHECK(rf__register_gpu_fused_matmul_kernels());
  RF_CHECK(rf__register_gpu_sum_to_shape_kernels());
  return NULL;
}
