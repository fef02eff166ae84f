/* kernels/conv_prepare.c - see conv_prepare.h. The graph guarantees dtypes
 * and ranks where it knew them; the checks here keep a mistyped or
 * misshapen feed from reading past a buffer. */
#include "kernels/conv_prepare.h"

#include <stdio.h>
#include <string.h>

#include "device/device.h"

static rf_status *err(rf__kernel_ctx *ctx, rf_status *st) {
  return rf__kernel_error_at(ctx, st);
}

/* Inputs in `mask` (bit k: input k) share one dtype: float32 or float64,
 * and on GPU devices also float16 or bfloat16 (the CPU kernels have no
 * half-precision loops: a CPU graph casts to float32 around the op). */
static rf_status *float_inputs(rf__kernel_ctx *ctx, unsigned mask) {
  bool gpu = ctx->device && ctx->device->name.type == RF_DEVICE_GPU;
  rf_dtype dt = RF_DTYPE_INVALID;
  for (int k = 0; k < ctx->num_inputs; k++) {
    if (!(mask >> k & 1)) continue;
    rf_dtype d = ctx->inputs[k]->dtype;
    bool half = d == RF_FLOAT16 || d == RF_BFLOAT16;
    if (half && !gpu && dt == RF_DTYPE_INVALID)
      return rf__kernel_error(ctx, RF_UNIMPLEMENTED,
                              "input %d has dtype %s, which runs on GPU "
                              "devices only; on CPU use float32 or float64",
                              k, rf_dtype_name(d));
    if ((d != RF_FLOAT32 && d != RF_FLOAT64 && !half) ||
        (dt != RF_DTYPE_INVALID && d != dt))
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "input %d has dtype %s; expected %s", k,
                              rf_dtype_name(d),
                              dt != RF_DTYPE_INVALID ? rf_dtype_name(dt)
                              : gpu ? "float16, bfloat16, float32 or float64"
                                    : "float32 or float64");
    dt = d;
  }
  return NULL;
}

static rf_status *rank4(rf__kernel_ctx *ctx, const char *what,
                        const rf_tensor *t) {
  if (t->shape.rank == 4) return NULL;
  char s[96];
  rf_shape_format(&t->shape, s, sizeof s);
  /* the filter is HWIO or OHWI (filter_format); the rest NHWC */
  return rf__kernel_error(
      ctx, RF_INVALID_ARGUMENT, "%s must have rank 4 (%s), got shape %s", what,
      strcmp(what, "filter") == 0 ? "HWIO or OHWI" : "NHWC", s);
}

/* The 4 sizes of an int32 or int64 vector input (attr Tsizes). */
static rf_status *sizes(rf__kernel_ctx *ctx, const char *what,
                        const rf_tensor *t, int64_t out[4]) {
  if ((t->dtype != RF_INT32 && t->dtype != RF_INT64) || t->shape.rank != 1 ||
      t->num_elements != 4)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "%s must be an int32 or int64 vector of 4 sizes",
                            what);
  for (int i = 0; i < 4; i++) {
    out[i] = t->dtype == RF_INT64 ? ((const int64_t *)t->data)[i]
                                  : ((const int32_t *)t->data)[i];
    if (out[i] < 0)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "%s[%d] is negative (%lld)", what, i,
                              (long long)out[i]);
  }
  return NULL;
}

/* t must be (n, oh, ow, oc) of g. */
static rf_status *out_shape(rf__kernel_ctx *ctx, const char *what,
                            const rf_tensor *t, const rf__conv_geom *g) {
  RF_CHECK(rank4(ctx, what, t));
  const int64_t *d = t->shape.dims;
  if (d[0] == g->n && d[1] == g->oh && d[2] == g->ow && d[3] == g->oc)
    return NULL;
  char s[96];
  rf_shape_format(&t->shape, s, sizeof s);
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "%s has shape %s; the window gives (%lld, "
                          "%lld, %lld, %lld)",
                          what, s, (long long)g->n, (long long)g->oh,
                          (long long)g->ow, (long long)g->oc);
}

static rf_status *channels(rf__kernel_ctx *ctx, int axis, int64_t filter_c,
                           int64_t input_c) {
  if (filter_c == input_c) return NULL;
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "the filter's in_channels (dim %d) (%lld) does not "
                          "match the input's channels (dim 3) (%lld)",
                          axis, (long long)filter_c, (long long)input_c);
}

/* The node's window attrs (the filter's layout for a convolution). */
static rf_status *attrs(rf__kernel_ctx *ctx, bool pool, rf__window_attrs *wa) {
  return err(ctx, rf__window_attrs_read(&ctx->node->attrs, pool, wa));
}

/* A convolution's geometry over input dims in[] and filter dims fd[] (in
 * the node's filter_format). */
static rf_status *conv_geom(rf__kernel_ctx *ctx, const int64_t in[4],
                            const int64_t fd[4], rf__conv_geom *g) {
  rf__window_attrs wa;
  RF_CHECK(attrs(ctx, false, &wa));
  rf__filter_axes ax = rf__filter_axes_of(wa.ohwi);
  RF_CHECK(channels(ctx, ax.c, fd[ax.c], in[3]));
  wa.kh = fd[ax.kh];
  wa.kw = fd[ax.kw];
  if (wa.kh < 1 || wa.kw < 1)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "the filter's window must be at least 1x1, got "
                            "%lldx%lld",
                            (long long)wa.kh, (long long)wa.kw);
  return err(ctx, rf__conv_geom_make(&wa, in, fd[ax.oc], g));
}

rf_status *rf__conv2d_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g) {
  const rf_tensor *x = ctx->inputs[0], *f = ctx->inputs[1];
  RF_CHECK(float_inputs(ctx, 3));
  RF_CHECK(rank4(ctx, "input", x));
  RF_CHECK(rank4(ctx, "filter", f));
  return conv_geom(ctx, x->shape.dims, f->shape.dims, g);
}

rf_status *rf__conv2d_backprop_input_prepare(rf__kernel_ctx *ctx,
                                             rf__conv_geom *g) {
  const rf_tensor *f = ctx->inputs[1], *dy = ctx->inputs[2];
  int64_t in[4];
  RF_CHECK(float_inputs(ctx, 6));
  RF_CHECK(sizes(ctx, "input_sizes", ctx->inputs[0], in));
  RF_CHECK(rank4(ctx, "filter", f));
  RF_CHECK(conv_geom(ctx, in, f->shape.dims, g));
  return out_shape(ctx, "out_backprop", dy, g);
}

rf_status *rf__conv2d_backprop_filter_prepare(rf__kernel_ctx *ctx,
                                              rf__conv_geom *g) {
  const rf_tensor *x = ctx->inputs[0], *dy = ctx->inputs[2];
  int64_t fs[4];
  RF_CHECK(float_inputs(ctx, 5));
  RF_CHECK(rank4(ctx, "input", x));
  RF_CHECK(sizes(ctx, "filter_sizes", ctx->inputs[1], fs));
  RF_CHECK(conv_geom(ctx, x->shape.dims, fs, g));
  return out_shape(ctx, "out_backprop", dy, g);
}

/* A pool's geometry over input dims in[]. */
static rf_status *pool_geom(rf__kernel_ctx *ctx, const int64_t in[4],
                            rf__conv_geom *g) {
  rf__window_attrs wa;
  RF_CHECK(attrs(ctx, true, &wa));
  return err(ctx, rf__conv_geom_make(&wa, in, in[3], g));
}

rf_status *rf__pool_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g) {
  const rf_tensor *x = ctx->inputs[0];
  RF_CHECK(float_inputs(ctx, 1));
  RF_CHECK(rank4(ctx, "input", x));
  return pool_geom(ctx, x->shape.dims, g);
}

rf_status *rf__max_pool_grad_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g) {
  const rf_tensor *x = ctx->inputs[0];
  RF_CHECK(float_inputs(ctx, 7));
  RF_CHECK(rank4(ctx, "orig_input", x));
  RF_CHECK(pool_geom(ctx, x->shape.dims, g));
  RF_CHECK(out_shape(ctx, "orig_output", ctx->inputs[1], g));
  return out_shape(ctx, "grad", ctx->inputs[2], g);
}

rf_status *rf__avg_pool_grad_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g) {
  int64_t in[4];
  RF_CHECK(float_inputs(ctx, 2));
  RF_CHECK(sizes(ctx, "orig_input_shape", ctx->inputs[0], in));
  RF_CHECK(pool_geom(ctx, in, g));
  return out_shape(ctx, "grad", ctx->inputs[1], g);
}
