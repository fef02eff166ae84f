/* kernels/matmul_shape.c - see matmul_shape.h: MatMul's checks, in the
 * order both devices report them (attrs, dtypes, ranks, inner dimensions,
 * int range, supported dtype). */
#include "kernels/matmul_shape.h"

#include <limits.h>
#include <string.h>

static rf_status *check_dims(rf__kernel_ctx *ctx, const rf_tensor *a,
                             const rf_tensor *b, rf__matmul_dims *d) {
  char sa[128], sb[128];
  rf_shape_format(&a->shape, sa, sizeof sa);
  rf_shape_format(&b->shape, sb, sizeof sb);
  if (a->shape.rank != 2 || b->shape.rank != 2)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "MatMul needs rank-2 inputs, got a %s and b %s", sa,
                            sb);
  d->lda = a->shape.dims[1];
  d->ldb = b->shape.dims[1];
  d->m = a->shape.dims[d->ta ? 1 : 0];
  d->k = a->shape.dims[d->ta ? 0 : 1];
  int64_t kb = b->shape.dims[d->tb ? 1 : 0];
  d->n = b->shape.dims[d->tb ? 0 : 1];
  if (d->k != kb)
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT,
        "Matrix size-incompatible: a %s%s and b %s%s have inner dimensions "
        "%lld and %lld",
        sa, d->ta ? " transposed" : "", sb, d->tb ? " transposed" : "",
        (long long)d->k, (long long)kb);
  /* An empty result or an empty sum multiplies nothing, so no BLAS call
   * and no int range: such products run whatever their dims. */
  if (d->m == 0 || d->n == 0 || d->k == 0) return NULL;
  const int64_t dims[] = {a->shape.dims[0], a->shape.dims[1], b->shape.dims[0],
                          b->shape.dims[1]};
  for (int i = 0; i < 4; i++)
    if (dims[i] > INT_MAX)
      return rf__kernel_error(ctx, RF_UNIMPLEMENTED,
                              "MatMul dimension %lld exceeds BLAS's int range",
                              (long long)dims[i]);
  return NULL;
}

rf_status *rf__matmul_prepare(rf__kernel_ctx *ctx, rf__matmul_dims *d,
                              rf_shape *c_shape) {
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  memset(d, 0, sizeof *d);
  RF_CHECK(rf__attrs_get_bool(&ctx->node->attrs, "transpose_a", &d->ta));
  RF_CHECK(rf__attrs_get_bool(&ctx->node->attrs, "transpose_b", &d->tb));
  if (a->dtype != b->dtype)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "MatMul operands have different dtypes %s and %s",
                            rf_dtype_name(a->dtype), rf_dtype_name(b->dtype));
  RF_CHECK(check_dims(ctx, a, b, d));
  rf_dtype dt = a->dtype;
  if (!rf_dtype_is_float(dt) && dt != RF_INT32 && dt != RF_INT64)
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "MatMul has no %s kernel",
                            rf_dtype_name(dt));
  *c_shape = rf_shape_of(2, d->m, d->n);
  return NULL;
}
