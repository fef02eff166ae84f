/* kernels/cuda/math_kernels.cuh - the files of the GPU math kernel family;
 * each registers its own kernels and math_kernels.cu calls them all from
 * rf__register_gpu_math_kernels (the CPU family's layout). */
#ifndef RF_KERNELS_CUDA_MATH_KERNELS_CUH
#define RF_KERNELS_CUDA_MATH_KERNELS_CUH

#include "kernels/cuda/gpu_common.cuh"

/* Add Sub Mul Div Equal _BroadcastToShapeOf */
rf_status *rf__register_gpu_binary_kernels(void);
rf_status *rf__register_gpu_nary_kernels(void);         /* Neg AddN */
rf_status *rf__register_gpu_cast_kernels(void);         /* Cast */
rf_status *rf__register_gpu_matmul_kernels(void);       /* MatMul */
/* _FusedMatMulBias, _FusedMatMulBiasRelu, _FusedMatMulBiasGrad */
rf_status *rf__register_gpu_fused_matmul_kernels(void);
rf_status *rf__register_gpu_sum_to_shape_kernels(void); /* _SumToShapeOf */

#endif
