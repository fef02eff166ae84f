/* kernels/math_prepare.c - see math_prepare.h: the elementwise math
 * kernels' checks, shared by the CPU and GPU kernels so both reject the
 * same inputs with the same message, in the same order. */
#include "kernels/math_prepare.h"

#include "core/shape.h"
#include "ops/broadcast_shape.h"

static bool numeric(rf_dtype d) {
  return rf_dtype_is_float(d) || rf_dtype_is_integer(d);
}

rf_status *rf__binary_prepare(rf__kernel_ctx *ctx, const char *op, bool compare,
                              rf_shape *out_shape) {
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  if (a->dtype != b->dtype)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "%s operands have different dtypes %s and %s", op,
                            rf_dtype_name(a->dtype), rf_dtype_name(b->dtype));
  if (!numeric(a->dtype) && !(compare && a->dtype == RF_BOOL))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "%s has no %s kernel", op,
                            rf_dtype_name(a->dtype));
  if (!rf__broadcast_shape(&a->shape, &b->shape, out_shape)) {
    char sa[128], sb[128];
    rf_shape_format(&a->shape, sa, sizeof sa);
    rf_shape_format(&b->shape, sb, sizeof sb);
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "Incompatible shapes: %s vs. %s", sa, sb);
  }
  /* Each input fits; their broadcast may not: (2^62, 1) + (1, 4). */
  return rf__kernel_error_at(ctx, rf__shape_check(out_shape));
}

rf_status *rf__broadcast_to_prepare(rf__kernel_ctx *ctx, rf_shape *out_shape,
                                    bool *done) {
  const rf_tensor *x = ctx->inputs[0], *like = ctx->inputs[1];
  *done = false;
  if (!rf__broadcast_shape(&x->shape, &like->shape, out_shape) ||
      !rf_shape_equal(out_shape, &like->shape)) {
    char sx[128], sl[128];
    rf_shape_format(&x->shape, sx, sizeof sx);
    rf_shape_format(&like->shape, sl, sizeof sl);
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "_BroadcastToShapeOf: cannot broadcast shape %s "
                            "to shape %s",
                            sx, sl);
  }
  if (rf_shape_equal(&x->shape, &like->shape)) {
    rf__kernel_forward_input(ctx, 0, 0);
    *done = true;
  }
  return NULL;
}

rf_status *rf__neg_prepare(rf__kernel_ctx *ctx) {
  rf_dtype dt = ctx->inputs[0]->dtype;
  if (numeric(dt) && dt != RF_UINT8) return NULL;
  return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "Neg has no %s kernel",
                          rf_dtype_name(dt));
}

rf_status *rf__add_n_prepare(rf__kernel_ctx *ctx, bool *done) {
  rf_tensor *const *in = ctx->inputs;
  int k = ctx->num_inputs;
  *done = false;
  for (int i = 1; i < k; i++) {
    if (in[i]->dtype != in[0]->dtype)
      return rf__kernel_error(
          ctx, RF_INVALID_ARGUMENT, "AddN input %d is %s, input 0 is %s", i,
          rf_dtype_name(in[i]->dtype), rf_dtype_name(in[0]->dtype));
    if (!rf_shape_equal(&in[i]->shape, &in[0]->shape)) {
      char s0[128], si[128];
      rf_shape_format(&in[0]->shape, s0, sizeof s0);
      rf_shape_format(&in[i]->shape, si, sizeof si);
      return rf__kernel_error(
          ctx, RF_INVALID_ARGUMENT,
          "AddN inputs must all have one shape: input 0 is %s, input %d is %s",
          s0, i, si);
    }
  }
  if (!numeric(in[0]->dtype))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "AddN has no %s kernel",
                            rf_dtype_name(in[0]->dtype));
  if (k == 1) {
    rf__kernel_forward_input(ctx, 0, 0);
    *done = true;
  }
  return NULL;
}

/* The axes of x along which like was broadcast; false when like's shape
 * does not broadcast to x's. */
static bool summed_axes(const rf_shape *x, const rf_shape *like,
                        uint32_t *mask) {
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

rf_status *rf__sum_to_shape_prepare(rf__kernel_ctx *ctx, uint32_t *mask,
                                    bool *done) {
  const rf_tensor *x = ctx->inputs[0], *like = ctx->inputs[1];
  uint32_t m;
  *done = false;
  if (!summed_axes(&x->shape, &like->shape, &m)) {
    char sx[128], sl[128];
    rf_shape_format(&x->shape, sx, sizeof sx);
    rf_shape_format(&like->shape, sl, sizeof sl);
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT,
        "_SumToShapeOf: cannot sum shape %s down to shape %s", sx, sl);
  }
  if (!numeric(x->dtype))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED,
                            "_SumToShapeOf has no %s kernel",
                            rf_dtype_name(x->dtype));
  if (mask) *mask = m;
  if (rf_shape_equal(&x->shape, &like->shape)) {
    rf__kernel_forward_input(ctx, 0, 0);
    *done = true;
  }
  return NULL;
}
