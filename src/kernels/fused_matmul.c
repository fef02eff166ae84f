/* kernels/fused_matmul.c - the _FusedMatMul* ops as their unfused kernels
 * (fused_matmul.h), and their CPU kernels, which are exactly that: on a
 * CPU the rewrite changes no result, so the CPU build tests it. */
#include "kernels/fused_matmul.h"

#include "core/status.h"
#include "device/device.h"
#include "ops/op_registry.h"

rf_status *rf__fused_matmul_bias_unfused(rf__kernel_ctx *ctx, bool relu) {
  rf_tensor *product = NULL, *sum = NULL;
  rf_status *st =
      rf__kernel_run_nested(ctx, "MatMul", ctx->inputs, 2, -1, &product);
  if (!st) {
    rf_tensor *in[2] = {product, ctx->inputs[2]};
    st = rf__kernel_run_nested(ctx, "BiasAdd", in, 2, relu ? -1 : 0, &sum);
  }
  if (!st && relu) st = rf__kernel_run_nested(ctx, "Relu", &sum, 1, 0, NULL);
  rf_tensor_release(product);
  if (relu) rf_tensor_release(sum);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

rf_status *rf__fused_matmul_bias_grad_unfused(rf__kernel_ctx *ctx) {
  int64_t which = 1;
  rf_status *st = rf__attrs_get_int(&ctx->node->attrs, "bias_input", &which);
  if (st) return rf__kernel_error_at(ctx, st);
  st = rf__kernel_run_nested(ctx, "MatMul", ctx->inputs, 2, 0, NULL);
  if (!st)
    st = rf__kernel_run_nested(ctx, "_BiasAddGrad", &ctx->inputs[which ? 1 : 0],
                               1, 1, NULL);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

static rf_status *bias_compute(rf__kernel_ctx *ctx) {
  return rf__fused_matmul_bias_unfused(ctx, false);
}
static rf_status *bias_relu_compute(rf__kernel_ctx *ctx) {
  return rf__fused_matmul_bias_unfused(ctx, true);
}

static const rf__kernel_def defs[] = {
    {.op = "_FusedMatMulBias",
     .device_type = RF_DEVICE_CPU,
     .compute = bias_compute},
    {.op = "_FusedMatMulBiasRelu",
     .device_type = RF_DEVICE_CPU,
     .compute = bias_relu_compute},
    {.op = "_FusedMatMulBiasGrad",
     .device_type = RF_DEVICE_CPU,
     .compute = rf__fused_matmul_bias_grad_unfused},
};

rf_status *rf__register_cpu_fused_matmul_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof *defs);
}
