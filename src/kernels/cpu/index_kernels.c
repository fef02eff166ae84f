/* kernels/cpu/index_kernels.c - CPU kernels of Gather (row copies by element
 * size, every dtype), _GatherGrad (scatter-add of dy rows in index order
 * into float64 scratch, rounded once: deterministic), OneHot and
 * Select (broadcast strides from kernels/index_prepare.h). An index out of
 * range is INVALID_ARGUMENT naming the node, its position and value. */
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "kernels/cpu/half.h"
#include "kernels/index_prepare.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"

static int64_t index_at(const rf_tensor *t, int64_t j) {
  return t->dtype == RF_INT32   ? ((const int32_t *)t->data)[j]
         : t->dtype == RF_INT64 ? ((const int64_t *)t->data)[j]
                                : ((const uint8_t *)t->data)[j];
}

/* Every index in [0, n), else the error naming the first that is not. */
static rf_status *check_indices(rf__kernel_ctx *ctx, const rf_tensor *idx,
                                int64_t n) {
  for (int64_t j = 0; j < idx->num_elements; j++) {
    int64_t v = index_at(idx, j);
    if (v < 0 || v >= n)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "indices[%lld] = %lld is not in [0, %lld)",
                              (long long)j, (long long)v, (long long)n);
  }
  return NULL;
}

typedef struct gather_args {
  const rf__gather_dims *d;
  const rf_tensor *params, *idx;
  rf_tensor *out;
  size_t row; /* bytes of one inner row */
} gather_args;

/* Output rows [begin, end) of (outer, k). */
static void gather_rows(void *arg, int64_t begin, int64_t end) {
  const gather_args *a = arg;
  const rf__gather_dims *d = a->d;
  for (int64_t r = begin; r < end; r++) {
    int64_t o = r / d->k, j = r % d->k;
    const char *src = (const char *)a->params->data +
                      (size_t)(o * d->n + index_at(a->idx, j)) * a->row;
    memcpy((char *)a->out->data + (size_t)r * a->row, src, a->row);
  }
}

static rf_status *gather_compute(rf__kernel_ctx *ctx) {
  rf__gather_dims d;
  RF_CHECK(rf__gather_prepare(ctx, &d));
  RF_CHECK(check_indices(ctx, ctx->inputs[1], d.n));
  gather_args a = {&d, ctx->inputs[0], ctx->inputs[1], NULL,
                   (size_t)d.inner * rf_dtype_size(ctx->inputs[0]->dtype)};
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, a.params->dtype, &d.out, &a.out));
  if (a.out->num_elements == 0) return NULL;
  rf__kernel_parallel_for(ctx, d.outer * d.k, d.inner + 8, gather_rows, &a);
  return NULL;
}

/* ---- _GatherGrad ---- */

typedef struct scatter_args {
  const rf__gather_dims *d;
  const rf_tensor *dy, *idx;
  double *acc; /* (outer, n, inner) */
} scatter_args;

/* Outer slices [begin, end): each adds its dy rows in index order. */
static void scatter_outer(void *arg, int64_t begin, int64_t end) {
  const scatter_args *a = arg;
  const rf__gather_dims *d = a->d;
  for (int64_t o = begin; o < end; o++)
    for (int64_t j = 0; j < d->k; j++) {
      double *dst = a->acc + (o * d->n + index_at(a->idx, j)) * d->inner;
      int64_t src = (o * d->k + j) * d->inner;
      for (int64_t i = 0; i < d->inner; i++)
        dst[i] += rf__float_load(a->dy->dtype, a->dy->data, src + i);
    }
}

/* Sums in float64 scratch, then one rounding to the dtype. */
static rf_status *gather_grad_compute(rf__kernel_ctx *ctx) {
  rf__gather_dims d;
  RF_CHECK(rf__gather_prepare(ctx, &d));
  RF_CHECK(check_indices(ctx, ctx->inputs[1], d.n));
  const rf_tensor *dy = ctx->inputs[0];
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, dy->dtype, &d.out, &out));
  if (out->num_elements == 0) return NULL;
  double *acc = rf__calloc((size_t)out->num_elements, sizeof *acc);
  if (!acc) {
    rf__kernel_drop_outputs(ctx);
    return rf__oom();
  }
  scatter_args a = {&d, dy, ctx->inputs[1], acc};
  rf__kernel_parallel_for(ctx, d.outer, (d.k + 1) * d.inner + 8, scatter_outer,
                          &a);
  for (int64_t i = 0; i < out->num_elements; i++)
    rf__float_store(dy->dtype, out->data, i, acc[i]);
  rf__free(acc);
  return NULL;
}

/* ---- OneHot ---- */

static rf_status *one_hot_compute(rf__kernel_ctx *ctx) {
  rf__one_hot_dims d;
  RF_CHECK(rf__one_hot_prepare(ctx, &d));
  rf_dtype dt;
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "T", &dt));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, dt, &d.out, &out));
  size_t es = rf_dtype_size(dt);
  const rf_tensor *idx = ctx->inputs[0];
  for (int64_t o = 0; o < d.outer; o++)
    for (int64_t c = 0; c < d.depth; c++)
      for (int64_t i = 0; i < d.inner; i++) {
        int64_t pos = (o * d.depth + c) * d.inner + i;
        bool on = index_at(idx, o * d.inner + i) == c;
        memcpy((char *)out->data + (size_t)pos * es,
               on ? &d.on_bits : &d.off_bits, es);
      }
  return NULL;
}

/* ---- Select ---- */

static rf_status *select_compute(rf__kernel_ctx *ctx) {
  rf__select_plan p;
  RF_CHECK(rf__select_prepare(ctx, &p));
  const rf_tensor *t = ctx->inputs[1];
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, t->dtype, &p.out, &out));
  size_t es = rf_dtype_size(t->dtype);
  const uint8_t *cond = ctx->inputs[0]->data;
  for (int64_t i = 0; i < p.count; i++) {
    int64_t off[3] = {0, 0, 0}, rest = i;
    for (int k = p.rank - 1; k >= 0; k--) {
      int64_t x = rest % p.dims[k];
      rest /= p.dims[k];
      for (int m = 0; m < 3; m++) off[m] += x * p.strides[m][k];
    }
    const rf_tensor *src = cond[off[0]] ? t : ctx->inputs[2];
    memcpy((char *)out->data + (size_t)i * es,
           (const char *)src->data + (size_t)off[cond[off[0]] ? 1 : 2] * es,
           es);
  }
  return NULL;
}

static const rf__kernel_def index_kernels[] = {
    RF_INDEX_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_index_kernels(void) {
  return rf__kernel_register_all(
      index_kernels, sizeof index_kernels / sizeof index_kernels[0]);
}
