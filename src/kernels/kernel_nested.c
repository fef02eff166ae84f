/* kernels/kernel_nested.c - a kernel running another op's kernel as a step
 * of its own: a fused op (passes/fuse_epilogues.c) computes exactly what
 * the ops it replaced would, on CPU devices and wherever its GPU fast path
 * is unavailable. The nested kernel sees the fused node (its attrs; errors
 * name it) and the fused kernel's device, stream and step; the fused
 * kernel says through the log sink when it falls back. */
#include <stddef.h>

#include "core/log.h"
#include "core/status.h"
#include "device/device.h"
#include "kernels/kernel.h"
#include "ops/op_registry.h"

/* The nested context, and where its output goes in the fused one. */
typedef struct nested {
  rf__kernel_ctx ctx; /* first: output_home gets &ctx */
  rf__kernel_ctx *parent;
  int out_index;
} nested;

/* The fused kernel's reserved place for its output out_index (a bucket
 * slice) becomes the nested kernel's output 0. */
static rf_tensor *nested_home(rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                              const rf_shape *shape) {
  nested *n = (nested *)ctx;
  rf__kernel_ctx *p = n->parent;
  if (i != 0 || n->out_index < 0 || !p->output_home) return NULL;
  return p->output_home(p, n->out_index, dtype, shape);
}

rf_status *rf__kernel_run_nested(rf__kernel_ctx *ctx, const char *op,
                                 rf_tensor *const *inputs, int num_inputs,
                                 int out_index, rf_tensor **out) {
  /* No device is the CPU, as for the other context helpers (a kernel run
   * alone, rf__kernel_run_single). */
  const rf__kernel_def *def =
      rf__kernel_find(op, ctx->device ? ctx->device->name.type : RF_DEVICE_CPU);
  if (!def || !def->compute)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "no synchronous %s kernel to run nested", op);
  rf_tensor *result = NULL;
  nested n = {.ctx = *ctx, .parent = ctx, .out_index = out_index};
  n.ctx.inputs = inputs;
  n.ctx.num_inputs = num_inputs;
  n.ctx.outputs = &result;
  n.ctx.num_outputs = 1;
  n.ctx.def = def;
  n.ctx.state = NULL;
  n.ctx.output_home = nested_home;
  rf_status *st = def->compute(&n.ctx);
  ctx->stream_taken = ctx->stream_taken || n.ctx.stream_taken;
  if (st || !result) {
    rf_tensor_release(result);
    return st ? st
              : rf__kernel_error(ctx, RF_INTERNAL, "nested %s made no output",
                                 op);
  }
  if (out_index >= 0) {
    rf_tensor_release(ctx->outputs[out_index]);
    ctx->outputs[out_index] = result;
  }
  if (out) *out = result;
  return NULL;
}

void rf__kernel_log_info(const rf__kernel_ctx *ctx, const char *what) {
  RF__LOG(RF_LOG_INFO, "node '%.200s' (%s) on %s: %s", ctx->node->name,
          ctx->node->op->name, ctx->device ? ctx->device->canonical : "?",
          what);
}

void rf__kernel_log_unfused(const rf__kernel_ctx *ctx, const char *unfused,
                            const char *why) {
  RF__LOG(RF_LOG_WARN,
          "node '%.200s' (%s) on %s: %s; it runs the unfused kernels (%s) at "
          "this shape",
          ctx->node->name, ctx->node->op->name,
          ctx->device ? ctx->device->canonical : "?", why, unfused);
}
