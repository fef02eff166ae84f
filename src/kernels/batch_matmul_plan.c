/* kernels/batch_matmul_plan.c - see batch_matmul_plan.h. */
#include "kernels/batch_matmul_plan.h"

#include <limits.h>
#include <string.h>

#include "core/status.h"
#include "ops/linalg_shapes.h"

/* Batch strides of operand s (rank r >= 2, matrix of `mat` elements)
 * aligned to the output's batch dims; 0 where s broadcasts. */
static void batch_strides(const rf_shape *s, int64_t mat, int brank,
                          int64_t *str) {
  int r = s->rank - 2;
  int64_t st = mat;
  for (int i = brank - 1, j = r - 1; i >= 0; i--, j--) {
    str[i] = j < 0 || s->dims[j] == 1 ? 0 : st;
    if (j >= 0) st *= s->dims[j] ? s->dims[j] : 1;
  }
}

/* Whole (stride `mat` per batch, row-major over bdims) or all zero. */
static bool uniform(const rf__bmm_plan *p, const int64_t *str, int64_t mat,
                    int64_t *stride) {
  bool zero = true, whole = true;
  int64_t want = mat;
  for (int i = p->brank - 1; i >= 0; i--) {
    if (p->bdims[i] == 1) continue;
    zero = zero && str[i] == 0;
    whole = whole && str[i] == want;
    want *= p->bdims[i];
  }
  *stride = zero ? 0 : mat;
  return zero || whole;
}

rf_status *rf__bmm_plan_make(rf__kernel_ctx *ctx, rf__bmm_plan *p) {
  memset(p, 0, sizeof *p);
  const rf_tensor *x = ctx->inputs[0], *y = ctx->inputs[1];
  const rf__attrs *a = &ctx->node->attrs;
  rf_status *st = rf__attrs_get_bool(a, "adj_x", &p->ax);
  if (!st) st = rf__attrs_get_bool(a, "adj_y", &p->ay);
  if (!st)
    st = rf__batch_matmul_shape(&x->shape, &y->shape, p->ax, p->ay, &p->out);
  if (st) return rf__kernel_error_at(ctx, st);
  const rf_shape *xs = &x->shape, *ys = &y->shape;
  p->m = p->out.dims[p->out.rank - 2];
  p->n = p->out.dims[p->out.rank - 1];
  p->k = xs->dims[xs->rank - (p->ax ? 2 : 1)];
  p->lda = xs->dims[xs->rank - 1];
  p->ldb = ys->dims[ys->rank - 1];
  p->brank = p->out.rank - 2;
  p->batch = 1;
  for (int i = 0; i < p->brank; i++) {
    p->bdims[i] = p->out.dims[i];
    p->batch *= p->bdims[i];
  }
  /* An empty result or empty sums multiply nothing (no BLAS call), so
   * BLAS's int range applies only to products that do. */
  bool multiplies = p->batch && p->m && p->n && p->k;
  if (multiplies && (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX))
    return rf__kernel_error(
        ctx, RF_UNIMPLEMENTED, "matrix dimensions (%lld, %lld, %lld) past %d",
        (long long)p->m, (long long)p->n, (long long)p->k, INT_MAX);
  batch_strides(xs, p->m * p->k, p->brank, p->xstr);
  batch_strides(ys, p->k * p->n, p->brank, p->ystr);
  p->strided = uniform(p, p->xstr, p->m * p->k, &p->xstride) &&
               uniform(p, p->ystr, p->k * p->n, &p->ystride);
  return NULL;
}

void rf__bmm_offsets(const rf__bmm_plan *p, int64_t b, int64_t *xo,
                     int64_t *yo) {
  *xo = *yo = 0;
  for (int i = p->brank - 1; i >= 0; i--) {
    int64_t j = b % p->bdims[i];
    b /= p->bdims[i];
    *xo += j * p->xstr[i];
    *yo += j * p->ystr[i];
  }
}
