/* kernels/cuda/reduce_sum.cuh - the GPU sum/mean engine behind Sum, Mean,
 * _BiasAddGrad and _SumToShapeOf: reduces any set of axes of a numeric
 * tensor on the device, deterministically.
 *
 * Floats add in double, integers in uint64 (wrapping as two's complement;
 * an integer mean is the exact sum divided by the count, truncated toward
 * zero), as on the CPU. Each output's sum is split into pieces that depend
 * only on the shape (never on the GPU or the grid), added in a fixed order:
 * one result for one input, every run, on every GPU. */
#ifndef RF_KERNELS_CUDA_REDUCE_SUM_CUH
#define RF_KERNELS_CUDA_REDUCE_SUM_CUH

#include "kernels/cuda/gpu_common.cuh"

namespace rf_gpu {

/* Reduces x (device memory) over the axes whose bit is set in mask into out,
 * a device tensor of x's dtype whose elements are x's kept axes in row-major
 * order (any shape with that element count). mean divides by the number of
 * elements reduced; an integer mean over zero elements is INVALID_ARGUMENT,
 * a float one is NaN. Enqueues on ctx's stream. */
rf_status *reduce_sum(rf__kernel_ctx *ctx, const rf_tensor *x, uint32_t mask,
                      bool mean, rf_tensor *out);

}  // namespace rf_gpu

#endif
