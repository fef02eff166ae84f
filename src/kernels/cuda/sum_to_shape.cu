/* kernels/cuda/sum_to_shape.cu - _SumToShapeOf(x, like) on GPU devices: x
 * summed over the dimensions along which `like` was broadcast, giving like's
 * shape (the gradient of a broadcasting binary op w.r.t. one input). The
 * summed axes become a mask for the deterministic reduction engine
 * (reduce_sum.cuh), which adds floats in double where the CPU kernel adds
 * in float: the results agree to float tolerance. */
#include "kernels/cuda/math_kernels.cuh"
#include "kernels/cuda/reduce_sum.cuh"
#include "kernels/math_prepare.h"

namespace rf_gpu {
namespace {

rf_status *sum_to_shape_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0], *like = ctx->inputs[1];
  uint32_t mask;
  bool done;
  RF_CHECK(rf__sum_to_shape_prepare(ctx, &mask, &done));
  if (done) return NULL;
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &like->shape, &y));
  rf_status *st = reduce_sum(ctx, x, mask, false, y);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

const rf__kernel_def sum_to_shape_def = {.op = "_SumToShapeOf",
                                         .device_type = RF_DEVICE_GPU,
                                         .compute = sum_to_shape_compute};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_sum_to_shape_kernels(void) {
  return rf__kernel_register(&rf_gpu::sum_to_shape_def);
}
