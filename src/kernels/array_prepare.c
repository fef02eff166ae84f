/* kernels/array_prepare.c - see array_prepare.h: what the CPU and GPU array
 * kernels share. Shape arithmetic comes from the ops' own helpers
 * (ops/array_shapes.h), so build time and run time reject alike. */
#include "kernels/array_prepare.h"

#include "core/status.h"
#include "ops/array_shapes.h"

rf_status *rf__const_value(const rf_node *node, rf_tensor **value) {
  RF_CHECK(rf__attrs_get_tensor(&node->attrs, "value", value));
  if (!*value)
    return rf__invalid("node '%s' (Const): attr value holds no tensor",
                       node->name);
  return NULL;
}

rf_status *rf__placeholder_compute(rf__kernel_ctx *ctx) {
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

rf_status *rf__identity_compute(rf__kernel_ctx *ctx) {
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

rf_status *rf__noop_compute(rf__kernel_ctx *ctx) { return NULL; }

rf_status *rf__reshape_compute(rf__kernel_ctx *ctx) {
  rf_tensor *x = ctx->inputs[0];
  int64_t dims[RF_MAX_RANK];
  int rank;
  rf_shape shape;
  rf_status *st = rf__dims_from_tensor(ctx->inputs[1], "shape", dims, &rank);
  if (!st) st = rf__reshape_output_shape(x->num_elements, dims, rank, &shape);
  if (st) return rf__kernel_error_at(ctx, st);
  return rf__tensor_new_view(x, &shape, &ctx->outputs[0]);
}

rf_status *rf__shape_compute(rf__kernel_ctx *ctx, bool on_gpu) {
  const rf_shape *s = &ctx->inputs[0]->shape;
  rf_dtype out_type;
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "out_type", &out_type));
  for (int i = 0; i < s->rank; i++)
    if (out_type != RF_INT64 && s->dims[i] > INT32_MAX)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "dimension %d (%lld) does not fit in int32; use "
                              "out_type int64",
                              i, (long long)s->dims[i]);
  rf_shape vec = rf_shape_of(1, (int64_t)s->rank);
  rf_tensor *out;
  if (on_gpu)
    RF_CHECK(rf__kernel_alloc_host_output(ctx, 0, out_type, &vec, &out));
  else
    RF_CHECK(rf__kernel_alloc_output(ctx, 0, out_type, &vec, &out));
  for (int i = 0; i < s->rank; i++) {
    if (out_type == RF_INT64)
      ((int64_t *)out->data)[i] = s->dims[i];
    else
      ((int32_t *)out->data)[i] = (int32_t)s->dims[i];
  }
  return NULL;
}

rf_status *rf__fill_prepare(rf__kernel_ctx *ctx, rf_shape *shape) {
  const rf_tensor *value = ctx->inputs[1];
  int64_t dims[RF_MAX_RANK];
  int rank;
  rf_status *st = rf__dims_from_tensor(ctx->inputs[0], "dims", dims, &rank);
  if (!st && value->shape.rank != 0) {
    char buf[128];
    rf_shape_format(&value->shape, buf, sizeof buf);
    st = rf__invalid("value must be a scalar, got shape %s", buf);
  }
  if (!st) st = rf__fill_output_shape(dims, rank, shape);
  return rf__kernel_error_at(ctx, st);
}
