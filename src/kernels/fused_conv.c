/* kernels/fused_conv.c - _FusedConv2DBiasRelu and _MaxPoolGradRelu as
 * their unfused kernels (fused_conv.h), and their CPU kernels, which are
 * exactly that: on a CPU the
 * rewrite changes no result, so the CPU build tests it. */
#include "kernels/fused_conv.h"

#include "core/status.h"
#include "device/device.h"
#include "ops/op_registry.h"

rf_status *rf__fused_conv_bias_relu_unfused(rf__kernel_ctx *ctx) {
  rf_tensor *conv = NULL, *sum = NULL;
  rf_status *st =
      rf__kernel_run_nested(ctx, "Conv2D", ctx->inputs, 2, -1, &conv);
  if (!st) {
    rf_tensor *in[2] = {conv, ctx->inputs[2]};
    st = rf__kernel_run_nested(ctx, "BiasAdd", in, 2, -1, &sum);
  }
  if (!st) st = rf__kernel_run_nested(ctx, "Relu", &sum, 1, 0, NULL);
  rf_tensor_release(conv);
  rf_tensor_release(sum);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

rf_status *rf__max_pool_grad_relu_unfused(rf__kernel_ctx *ctx) {
  rf_tensor *grad = NULL;
  rf_status *st =
      rf__kernel_run_nested(ctx, "MaxPoolGrad", ctx->inputs, 3, -1, &grad);
  if (!st) {
    rf_tensor *in[2] = {grad, ctx->inputs[0]};
    st = rf__kernel_run_nested(ctx, "_ReluGrad", in, 2, 0, NULL);
  }
  rf_tensor_release(grad);
  if (st) rf__kernel_drop_outputs(ctx);
  return st;
}

static const rf__kernel_def defs[] = {
    {.op = "_FusedConv2DBiasRelu",
     .device_type = RF_DEVICE_CPU,
     .compute = rf__fused_conv_bias_relu_unfused,
     .cost = RF_COST_EXPENSIVE},
    {.op = "_MaxPoolGradRelu",
     .device_type = RF_DEVICE_CPU,
     .compute = rf__max_pool_grad_relu_unfused,
     .cost = RF_COST_EXPENSIVE},
};

rf_status *rf__register_cpu_fused_conv_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof *defs);
}
