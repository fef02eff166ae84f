/* kernels/cuda/sum_to_shape.cu - _SumToShapeOf(x, like) on GPU devices: x
 * summed over the dimensions along which `like` was broadcast, giving like's
 * shape (the gradient of a broadcasting binary op w.r.t. one input). The
 * summed axes become a mask for the deterministic reduction engine
 * (reduce_sum.cuh), which adds floats in double where the CPU kernel adds
 * in float: the results agree to float tolerance. */
#include "kernels/cuda/math_kernels.cuh"
#include "kernels/cuda/reduce_sum.cuh"

namespace rf_gpu {
namespace {

/* The axes of x along which like was broadcast; false when like's shape
 * does not broadcast to x's. */
bool summed_axes(const rf_shape *x, const rf_shape *like, uint32_t *mask) {
  if (like->rank > x->rank) return false;
  *mask = 0;
  for (int i = 0; i < x->rank; i++) {
    int k = like->rank - x->rank + i;
    int64_t xd = x->dims[i], ld = k >= 0 ? like->dims[k] : 1;
    if (ld != xd && ld != 1) return false;
    if (ld == 1) *mask |= 1u << i;
  }
  return true;
}

rf_status *sum_to_shape_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0], *like = ctx->inputs[1];
  uint32_t mask;
  if (!summed_axes(&x->shape, &like->shape, &mask)) {
    char sx[128], sl[128];
    rf_shape_format(&x->shape, sx, sizeof sx);
    rf_shape_format(&like->shape, sl, sizeof sl);
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT,
        "_SumToShapeOf: cannot sum shape %s down to shape %s", sx, sl);
  }
  if (!is_numeric(x->dtype))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED,
                            "_SumToShapeOf has no %s kernel",
                            rf_dtype_name(x->dtype));
  if (rf_shape_equal(&x->shape, &like->shape)) {
    rf__kernel_forward_input(ctx, 0, 0);
    return NULL;
  }
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &like->shape, &y));
  rf_status *st = reduce_sum(ctx, x, mask, false, y);
  if (st) {
    rf_tensor_release(ctx->outputs[0]);
    ctx->outputs[0] = NULL;
  }
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
