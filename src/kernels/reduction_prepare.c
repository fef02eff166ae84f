/* kernels/reduction_prepare.c - see reduction_prepare.h: the reduction
 * kernels' checks and shapes, in the order both devices report them. */
#include "kernels/reduction_prepare.h"

#include "ops/reduction_axes.h"

/* The node's reduced-axes mask for an input of `rank`. */
static rf_status *node_mask(rf__kernel_ctx *ctx, int rank, uint32_t *mask,
                            bool *keep_dims) {
  rf__reduction_attrs r;
  RF_CHECK(rf__kernel_error_at(
      ctx, rf__reduction_attrs_read(&ctx->node->attrs, &r)));
  RF_CHECK(rf__kernel_error_at(ctx, rf__reduction_mask(&r, rank, mask)));
  *keep_dims = r.keep_dims;
  return NULL;
}

/* INVALID_ARGUMENT unless t is of a numeric dtype (a mistyped feed must not
 * be read as another type). */
static rf_status *numeric(rf__kernel_ctx *ctx, const rf_tensor *t) {
  if (rf_dtype_is_float(t->dtype) || rf_dtype_is_integer(t->dtype)) return NULL;
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "expected a numeric tensor, got %s",
                          rf_dtype_name(t->dtype));
}

rf_status *rf__reduce_prepare(rf__kernel_ctx *ctx, uint32_t *mask,
                              rf_shape *out_shape) {
  const rf_tensor *x = ctx->inputs[0];
  RF_CHECK(numeric(ctx, x));
  bool keep;
  RF_CHECK(node_mask(ctx, x->shape.rank, mask, &keep));
  *out_shape = rf__reduced_shape(&x->shape, *mask, keep);
  return NULL;
}

rf_status *rf__reduce_grad_prepare(rf__kernel_ctx *ctx, uint32_t *mask) {
  const rf_tensor *dy = ctx->inputs[0], *x = ctx->inputs[1];
  RF_CHECK(numeric(ctx, x));
  bool keep;
  RF_CHECK(node_mask(ctx, x->shape.rank, mask, &keep));
  rf_shape want = rf__reduced_shape(&x->shape, *mask, keep);
  if (!rf_shape_equal(&dy->shape, &want) || dy->dtype != x->dtype) {
    char a[96], b[96], c[96];
    rf_shape_format(&dy->shape, a, sizeof a);
    rf_shape_format(&x->shape, b, sizeof b);
    rf_shape_format(&want, c, sizeof c);
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy %s %s does not match x %s %s reduced to %s",
                            rf_dtype_name(dy->dtype), a,
                            rf_dtype_name(x->dtype), b, c);
  }
  return NULL;
}

rf_status *rf__argmax_prepare(rf__kernel_ctx *ctx, rf__argmax_dims *d,
                              rf_shape *out_shape) {
  const rf_tensor *x = ctx->inputs[0];
  int64_t axis;
  RF_CHECK(rf__kernel_error_at(
      ctx, rf__attrs_get_int(&ctx->node->attrs, "axis", &axis)));
  int rank = x->shape.rank;
  if (rank == 0)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "ArgMax needs an input of rank >= 1, got a scalar");
  if (axis < -rank || axis >= rank)
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT,
        "axis %lld is out of range for an input of rank %d (valid: [%d, %d))",
        (long long)axis, rank, -rank, rank);
  if (!rf_dtype_is_float(x->dtype) && !rf_dtype_is_integer(x->dtype))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "ArgMax of %s",
                            rf_dtype_name(x->dtype));
  int k = (int)(axis < 0 ? axis + rank : axis);
  d->axis = k;
  d->n = x->shape.dims[k];
  d->inner = d->outer = 1;
  for (int i = k + 1; i < rank; i++) d->inner *= x->shape.dims[i];
  for (int i = 0; i < k; i++) d->outer *= x->shape.dims[i];
  if (d->n == 0 && d->outer * d->inner > 0)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "ArgMax over axis %d of length 0", k);
  *out_shape = rf__reduced_shape(&x->shape, 1u << k, false);
  return NULL;
}
