/* kernels/index_prepare.c - see index_prepare.h. */
#include "kernels/index_prepare.h"

#include <string.h>

#include "core/status.h"
#include "ops/index_shapes.h"

static int64_t prod(const rf_shape *s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= s->dims[i]; /* fits: checked shapes */
  return p;
}

rf_status *rf__gather_prepare(rf__kernel_ctx *ctx, rf__gather_dims *d) {
  bool grad = ctx->num_inputs == 3;
  const rf_shape *params = &ctx->inputs[grad ? 2 : 0]->shape;
  const rf_shape *idx = &ctx->inputs[1]->shape;
  int64_t axis;
  rf_status *st = rf__attrs_get_int(&ctx->node->attrs, "axis", &axis);
  if (!st) st = rf__gather_shape(params, idx, &axis, &d->out);
  if (!st && grad && !rf_shape_equal(&d->out, &ctx->inputs[0]->shape)) {
    char a[96], b[96];
    rf_shape_format(&ctx->inputs[0]->shape, a, sizeof a);
    rf_shape_format(&d->out, b, sizeof b);
    st = rf__invalid("dy has shape %s but the gather gives %s", a, b);
  }
  if (st) return rf__kernel_error_at(ctx, st);
  if (grad) d->out = *params;
  d->outer = prod(params, 0, (int)axis);
  d->n = params->dims[axis];
  d->inner = prod(params, (int)axis + 1, params->rank);
  d->k = prod(idx, 0, idx->rank);
  return NULL;
}

static rf_status *element_bits(rf_dtype dt, double v, uint64_t *bits) {
  rf_tensor *t;
  RF_CHECK(rf_tensor_new_scalar(dt, v, &t));
  *bits = 0;
  memcpy(bits, rf_tensor_data(t), rf_dtype_size(dt));
  rf_tensor_release(t);
  return NULL;
}

rf_status *rf__one_hot_prepare(rf__kernel_ctx *ctx, rf__one_hot_dims *d) {
  const rf__attrs *a = &ctx->node->attrs;
  const rf_shape *idx = &ctx->inputs[0]->shape;
  int64_t axis;
  double on, off;
  rf_dtype dt;
  rf_status *st = rf__attrs_get_int(a, "depth", &d->depth);
  if (!st) st = rf__attrs_get_int(a, "axis", &axis);
  if (!st) st = rf__attrs_get_float(a, "on_value", &on);
  if (!st) st = rf__attrs_get_float(a, "off_value", &off);
  if (!st) st = rf__attrs_get_type(a, "T", &dt);
  if (!st) st = rf__one_hot_shape(idx, d->depth, axis, &d->out);
  if (!st) st = element_bits(dt, on, &d->on_bits);
  if (!st) st = element_bits(dt, off, &d->off_bits);
  if (st) return rf__kernel_error_at(ctx, st);
  if (axis < 0) axis += idx->rank + 1;
  d->outer = prod(idx, 0, (int)axis);
  d->inner = prod(idx, (int)axis, idx->rank);
  return NULL;
}

rf_status *rf__select_prepare(rf__kernel_ctx *ctx, rf__select_plan *p) {
  memset(p, 0, sizeof *p);
  RF_CHECK(rf__kernel_error_at(
      ctx, rf__select_shape(&ctx->inputs[0]->shape, &ctx->inputs[1]->shape,
                            &ctx->inputs[2]->shape, &p->out)));
  p->rank = p->out.rank;
  p->count = prod(&p->out, 0, p->rank);
  for (int i = 0; i < p->rank; i++) p->dims[i] = p->out.dims[i];
  for (int k = 0; k < 3; k++) {
    const rf_shape *s = &ctx->inputs[k]->shape;
    int64_t st = 1;
    for (int i = s->rank - 1, o = p->rank - 1; i >= 0; i--, o--) {
      p->strides[k][o] = s->dims[i] == 1 ? 0 : st;
      st *= s->dims[i] ? s->dims[i] : 1;
    }
  }
  return NULL;
}
