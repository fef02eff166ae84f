/* kernels/cpu/array_kernels.c - CPU kernels of the array ops. Nothing here
 * copies data that can be shared: Const hands out its attr tensor, Identity
 * forwards its input and Reshape returns a view of its input's buffer
 * (tensors are immutable, and views keep the buffer alive by reference). */
#include <string.h>

#include "core/status.h"
#include "kernels/array_prepare.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"

/* Const: the node's value tensor, retained once per session in init. */
static rf_status *const_init(const rf_node *node, void **state) {
  rf_tensor *value;
  RF_CHECK(rf__const_value(node, &value));
  *state = rf_tensor_retain(value);
  return NULL;
}

static void const_destroy(void *state) { rf_tensor_release(state); }

static rf_status *const_compute(rf__kernel_ctx *ctx) {
  ctx->outputs[0] = rf_tensor_retain(ctx->state);
  return NULL;
}

/* Placeholder, Identity, NoOp, Reshape and Shape touch no element:
 * kernels/array_prepare.c. */
static rf_status *reshape_compute(rf__kernel_ctx *ctx) {
  return rf__reshape_compute(ctx);
}
static rf_status *shape_compute(rf__kernel_ctx *ctx) {
  return rf__shape_compute(ctx, false);
}

/* Fills n elements of `size` bytes with the element at `value`. Plain loops
 * over fixed-width integers, so the compiler vectorises them. */
static void fill_bytes(void *restrict dst, const void *restrict value,
                       size_t size, int64_t n) {
  switch (size) {
    case 1: memset(dst, *(const uint8_t *)value, (size_t)n); break;
    case 2: {
      uint16_t v, *restrict d = dst;
      memcpy(&v, value, 2);
      for (int64_t i = 0; i < n; i++) d[i] = v;
      break;
    }
    case 4: {
      uint32_t v, *restrict d = dst;
      memcpy(&v, value, 4);
      for (int64_t i = 0; i < n; i++) d[i] = v;
      break;
    }
    default: {
      uint64_t v, *restrict d = dst;
      memcpy(&v, value, 8);
      for (int64_t i = 0; i < n; i++) d[i] = v;
      break;
    }
  }
}

static rf_status *fill_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *value = ctx->inputs[1];
  rf_shape shape;
  RF_CHECK(rf__fill_prepare(ctx, &shape));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, value->dtype, &shape, &out));
  fill_bytes(out->data, value->data, rf_dtype_size(value->dtype),
             out->num_elements);
  return NULL;
}

static rf_status *zeros_like_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &x->shape, &out));
  memset(out->data, 0, out->nbytes); /* all-zero bits are 0 in every dtype */
  return NULL;
}

static rf_status *ones_like_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  rf_tensor *one, *out;
  /* rf_tensor_set writes 1 in the dtype's own encoding (half, bool...). */
  RF_CHECK(rf_tensor_new_scalar(x->dtype, 1.0, &one));
  rf_status *st = rf__kernel_alloc_output(ctx, 0, x->dtype, &x->shape, &out);
  if (!st)
    fill_bytes(out->data, one->data, rf_dtype_size(x->dtype),
               out->num_elements);
  rf_tensor_release(one);
  return st;
}

static const rf__kernel_def array_kernels[] = {
    /* Const has an init and a destroy: not in RF_ARRAY_KERNELS */
    {.op = "Const",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .init = const_init,
     .destroy = const_destroy,
     .compute = const_compute},
    RF_ARRAY_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_array_kernels(void) {
  return rf__kernel_register_all(
      array_kernels, sizeof array_kernels / sizeof array_kernels[0]);
}
