/* kernels/nn_prepare.c - see nn_prepare.h: the nn kernels' argument checks,
 * shared by the CPU and GPU kernels so both reject the same inputs with the
 * same message. The graph guarantees dtypes and ranks; the checks keep a
 * mistyped or misshapen feed from reading past a buffer. */
#include "kernels/nn_prepare.h"

#include <stdio.h>

static rf_status *shape_error(rf__kernel_ctx *ctx, const char *what,
                              const rf_tensor *t, const char *need) {
  char s[96];
  rf_shape_format(&t->shape, s, sizeof s);
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "%s must be %s, got shape %s", what, need, s);
}

static int64_t last(const rf_tensor *t) {
  return t->shape.dims[t->shape.rank - 1];
}

/* INVALID_ARGUMENT unless the inputs in `mask` (bit k: input k) share one
 * float dtype. */
static rf_status *float_inputs(rf__kernel_ctx *ctx, unsigned mask) {
  rf_dtype dt = RF_DTYPE_INVALID;
  for (int k = 0; k < ctx->num_inputs; k++) {
    if (!(mask >> k & 1)) continue;
    rf_dtype d = ctx->inputs[k]->dtype;
    if (!rf_dtype_is_float(d) || (dt != RF_DTYPE_INVALID && d != dt))
      return rf__kernel_error(
          ctx, RF_INVALID_ARGUMENT, "input %d has dtype %s; expected %s", k,
          rf_dtype_name(d),
          dt == RF_DTYPE_INVALID ? "a float dtype" : rf_dtype_name(dt));
    dt = d;
  }
  return NULL;
}

/* INVALID_ARGUMENT unless a and b have one shape. */
static rf_status *same_shape(rf__kernel_ctx *ctx, const char *an,
                             const rf_tensor *a, const char *bn,
                             const rf_tensor *b) {
  if (rf_shape_equal(&a->shape, &b->shape)) return NULL;
  char sa[96], sb[96];
  rf_shape_format(&a->shape, sa, sizeof sa);
  rf_shape_format(&b->shape, sb, sizeof sb);
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "%s has shape %s but %s has shape %s", an, sa, bn,
                          sb);
}

/* vec must be (b) and mat (b, c). */
static rf_status *check_rows(rf__kernel_ctx *ctx, const char *vn,
                             const rf_tensor *vec, const char *mn,
                             const rf_tensor *mat) {
  if (mat->shape.rank != 2) return shape_error(ctx, mn, mat, "of rank 2");
  if (vec->shape.rank != 1) return shape_error(ctx, vn, vec, "of rank 1");
  if (vec->shape.dims[0] == mat->shape.dims[0]) return NULL;
  char s[96], need[128];
  rf_shape_format(&mat->shape, s, sizeof s);
  snprintf(need, sizeof need, "(%lld) to match %s %s",
           (long long)mat->shape.dims[0], mn, s);
  return shape_error(ctx, vn, vec, need);
}

rf_status *rf__bias_add_prepare(rf__kernel_ctx *ctx, int64_t *c) {
  const rf_tensor *x = ctx->inputs[0], *bias = ctx->inputs[1];
  RF_CHECK(float_inputs(ctx, 3));
  if (x->shape.rank < 1) return shape_error(ctx, "value", x, "of rank >= 1");
  if (bias->shape.rank != 1 || bias->shape.dims[0] != last(x)) {
    char a[96], b[96];
    rf_shape_format(&bias->shape, b, sizeof b);
    rf_shape_format(&x->shape, a, sizeof a);
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT,
        "bias of shape %s does not match the last dimension of value %s", b, a);
  }
  *c = last(x);
  return NULL;
}

rf_status *rf__bias_add_grad_prepare(rf__kernel_ctx *ctx, rf_shape *shape,
                                     uint32_t *mask) {
  const rf_tensor *dy = ctx->inputs[0];
  RF_CHECK(float_inputs(ctx, 1));
  int rank = dy->shape.rank;
  if (rank < 1) return shape_error(ctx, "out_backprop", dy, "of rank >= 1");
  *shape = rf_shape_of(1, last(dy));
  *mask = (1u << (rank - 1)) - 1;
  return NULL;
}

rf_status *rf__softmax_prepare(rf__kernel_ctx *ctx, int64_t *c) {
  const rf_tensor *x = ctx->inputs[0];
  RF_CHECK(float_inputs(ctx, 1));
  if (x->shape.rank < 1) return shape_error(ctx, "logits", x, "of rank >= 1");
  *c = last(x);
  return NULL;
}

rf_status *rf__softmax_grad_prepare(rf__kernel_ctx *ctx, int64_t *c) {
  const rf_tensor *dy = ctx->inputs[0], *y = ctx->inputs[1];
  RF_CHECK(float_inputs(ctx, 3));
  if (y->shape.rank < 1) return shape_error(ctx, "softmax", y, "of rank >= 1");
  RF_CHECK(same_shape(ctx, "grad_softmax", dy, "softmax", y));
  *c = last(y);
  return NULL;
}

rf_status *rf__xent_prepare(rf__kernel_ctx *ctx, rf_shape *loss_shape,
                            int64_t *c) {
  const rf_tensor *x = ctx->inputs[0], *labels = ctx->inputs[1];
  RF_CHECK(float_inputs(ctx, 1));
  RF_CHECK(check_rows(ctx, "labels", labels, "logits", x));
  if (labels->dtype != RF_INT32 && labels->dtype != RF_INT64)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "labels must be int32 or int64, got %s",
                            rf_dtype_name(labels->dtype));
  *loss_shape = rf_shape_of(1, x->shape.dims[0]);
  *c = x->shape.dims[1];
  return NULL;
}

rf_status *rf__xent_with_grad_prepare(rf__kernel_ctx *ctx, rf_shape *loss_shape,
                                      int64_t *c) {
  RF_CHECK(rf__xent_prepare(ctx, loss_shape, c));
  RF_CHECK(float_inputs(ctx, 5));
  return check_rows(ctx, "dloss", ctx->inputs[2], "logits", ctx->inputs[0]);
}

rf_status *rf__xent_grad_prepare(rf__kernel_ctx *ctx, int64_t *c) {
  const rf_tensor *dloss = ctx->inputs[0], *bp = ctx->inputs[1];
  RF_CHECK(float_inputs(ctx, 3));
  RF_CHECK(check_rows(ctx, "dloss", dloss, "backprop", bp));
  *c = bp->shape.dims[1];
  return NULL;
}

rf_status *rf__activation_prepare(rf__kernel_ctx *ctx, bool ints,
                                  const char *device) {
  const rf_tensor *a = ctx->inputs[0];
  const rf_tensor *b = ctx->num_inputs > 1 ? ctx->inputs[1] : NULL;
  rf_dtype d = a->dtype;
  if (!rf_dtype_is_float(d) &&
      !(ints && (d == RF_INT8 || d == RF_INT32 || d == RF_INT64)))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "no %s kernel for %s",
                            device, rf_dtype_name(d));
  if (b && (b->dtype != a->dtype || !rf_shape_equal(&a->shape, &b->shape))) {
    char sa[96], sb[96];
    rf_shape_format(&a->shape, sa, sizeof sa);
    rf_shape_format(&b->shape, sb, sizeof sb);
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT, "inputs differ: %s %s and %s %s",
        rf_dtype_name(a->dtype), sa, rf_dtype_name(b->dtype), sb);
  }
  return NULL;
}
