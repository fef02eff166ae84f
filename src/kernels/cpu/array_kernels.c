/* kernels/cpu/array_kernels.c - CPU kernels of the array ops. Nothing here
 * copies data that can be shared: Const hands out its attr tensor, Identity
 * forwards its input and Reshape returns a view of its input's buffer
 * (tensors are immutable, and views keep the buffer alive by reference). */
#include <string.h>

#include "core/status.h"
#include "kernels/kernel.h"
#include "ops/array_shapes.h"
#include "ops/families.h"

/* Const: the node's value tensor, retained once per session in init. */
static rf_status *const_init(const rf_node *node, void **state) {
  rf_tensor *value;
  RF_CHECK(rf__attrs_get_tensor(&node->attrs, "value", &value));
  if (!value)
    return rf__invalid("node '%s' (Const): attr value holds no tensor",
                       node->name);
  *state = rf_tensor_retain(value);
  return NULL;
}

static void const_destroy(void *state) { rf_tensor_release(state); }

static rf_status *const_compute(rf__kernel_ctx *ctx) {
  ctx->outputs[0] = rf_tensor_retain(ctx->state);
  return NULL;
}

/* Fed placeholders are replaced by _Arg nodes, so running one means it was
 * not fed. */
static rf_status *placeholder_compute(rf__kernel_ctx *ctx) {
  rf_dtype dtype = RF_DTYPE_INVALID;
  rf_shape shape = rf_shape_unknown();
  rf_status_free(rf__attrs_get_type(&ctx->node->attrs, "dtype", &dtype));
  rf_status_free(rf__attrs_get_shape(&ctx->node->attrs, "shape", &shape));
  char buf[128];
  rf_shape_format(&shape, buf, sizeof buf);
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "You must feed a value for placeholder '%s' with "
                          "dtype %s and shape %s",
                          ctx->node->name, rf_dtype_name(dtype), buf);
}

static rf_status *identity_compute(rf__kernel_ctx *ctx) {
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static rf_status *noop_compute(rf__kernel_ctx *ctx) { return NULL; }

/* Prefixes a shape helper's message with the node. */
static rf_status *node_error(const rf__kernel_ctx *ctx, rf_status *st) {
  if (!st || rf_status_code(st) == RF_RESOURCE_EXHAUSTED) return st;
  rf_status *out =
      rf__kernel_error(ctx, rf_status_code(st), "%s", rf_status_message(st));
  rf_status_free(st);
  return out;
}

static rf_status *reshape_compute(rf__kernel_ctx *ctx) {
  rf_tensor *x = ctx->inputs[0];
  int64_t dims[RF_MAX_RANK];
  int rank;
  rf_shape shape;
  rf_status *st = rf__dims_from_tensor(ctx->inputs[1], "shape", dims, &rank);
  if (!st) st = rf__reshape_output_shape(x->num_elements, dims, rank, &shape);
  if (st) return node_error(ctx, st);
  return rf__tensor_new_view(x, &shape, &ctx->outputs[0]);
}

static rf_status *shape_compute(rf__kernel_ctx *ctx) {
  const rf_shape *s = &ctx->inputs[0]->shape;
  rf_dtype out_type;
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "out_type", &out_type));
  rf_shape vec = rf_shape_of(1, (int64_t)s->rank);
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, out_type, &vec, &out));
  for (int i = 0; i < s->rank; i++) {
    if (out_type == RF_INT64) {
      ((int64_t *)out->data)[i] = s->dims[i];
    } else if (s->dims[i] > INT32_MAX) {
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "dimension %d (%lld) does not fit in int32; use "
                              "out_type int64",
                              i, (long long)s->dims[i]);
    } else {
      ((int32_t *)out->data)[i] = (int32_t)s->dims[i];
    }
  }
  return NULL;
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
  int64_t dims[RF_MAX_RANK];
  int rank;
  rf_shape shape;
  rf_status *st = rf__dims_from_tensor(ctx->inputs[0], "dims", dims, &rank);
  if (!st && value->shape.rank != 0) {
    char buf[128];
    rf_shape_format(&value->shape, buf, sizeof buf);
    st = rf__invalid("value must be a scalar, got shape %s", buf);
  }
  if (!st) st = rf__fill_output_shape(dims, rank, &shape);
  if (st) return node_error(ctx, st);
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
    {.op = "Const",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .init = const_init,
     .destroy = const_destroy,
     .compute = const_compute},
    {.op = "Placeholder",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = placeholder_compute},
    {.op = "Identity",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = identity_compute},
    {.op = "NoOp",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = noop_compute},
    {.op = "Reshape",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = reshape_compute,
     .host_memory_inputs = 1u << 1},
    {.op = "Shape",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = shape_compute,
     .host_memory_outputs = 1u << 0},
    {.op = "Fill",
     .device_type = RF_DEVICE_CPU,
     .compute = fill_compute,
     .host_memory_inputs = 1u << 0},
    {.op = "ZerosLike",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_PER_ELEMENT,
     .compute = zeros_like_compute},
    {.op = "OnesLike",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_PER_ELEMENT,
     .compute = ones_like_compute},
};

rf_status *rf__register_cpu_array_kernels(void) {
  for (size_t i = 0; i < sizeof array_kernels / sizeof array_kernels[0]; i++)
    RF_CHECK(rf__kernel_register(&array_kernels[i]));
  return NULL;
}
