/* kernels/cpu/shape_kernels.c - CPU kernels of the shape ops: each runs the
 * plan of kernels/shape_prepare.h (an optional fill, then strided copies by
 * element size, so every dtype shares one loop), split by rows over the
 * device's pool. ExpandDims and Squeeze return views. _TileGrad sums dy over
 * the tiles in float64 for floats and wrapping int64 for integers. */
#include <string.h>

#include "core/status.h"
#include "kernels/cpu/half.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"
#include "kernels/shape_prepare.h"

/* ---- strided copy ---- */

typedef struct copy_args {
  const rf__copy_plan *p;
  const char *src;
  char *dst;
  size_t esize;
} copy_args;

/* One row: the plan's last dim (or the single element of rank 0). */
static void copy_row(const copy_args *a, int64_t s, int64_t d) {
  const rf__copy_plan *p = a->p;
  size_t es = a->esize;
  if (p->rank == 0) {
    memcpy(a->dst + d * es, a->src + s * es, es);
    return;
  }
  int64_t n = p->dims[p->rank - 1], ss = p->src_strides[p->rank - 1],
          ds = p->dst_strides[p->rank - 1];
  if (ss == 1 && ds == 1) {
    memcpy(a->dst + d * es, a->src + s * es, (size_t)n * es);
    return;
  }
#define STRIDED(T)                                            \
  do {                                                        \
    const T *restrict in = (const T *)a->src + s;             \
    T *restrict out = (T *)a->dst + d;                        \
    for (int64_t i = 0; i < n; i++) out[i * ds] = in[i * ss]; \
  } while (0)
  switch (es) {
    case 1: STRIDED(uint8_t); break;
    case 2: STRIDED(uint16_t); break;
    case 4: STRIDED(uint32_t); break;
    default: STRIDED(uint64_t); break;
  }
#undef STRIDED
}

/* Rows [begin, end): row r's offsets from its index over dims[0, rank-1). */
static void copy_rows(void *arg, int64_t begin, int64_t end) {
  const copy_args *a = arg;
  const rf__copy_plan *p = a->p;
  for (int64_t r = begin; r < end; r++) {
    int64_t s = p->src_offset, d = p->dst_offset, rest = r;
    for (int k = p->rank - 2; k >= 0; k--) {
      int64_t i = rest % p->dims[k];
      rest /= p->dims[k];
      s += i * p->src_strides[k];
      d += i * p->dst_strides[k];
    }
    copy_row(a, s, d);
  }
}

static void run_plan(rf__kernel_ctx *ctx, const rf__copy_plan *p,
                     const void *src, void *dst, size_t esize) {
  copy_args a = {p, src, dst, esize};
  int64_t row = p->rank ? p->dims[p->rank - 1] : 1;
  rf__kernel_parallel_for(ctx, p->count / row, row + 8, copy_rows, &a);
}

static void fill(void *dst, size_t esize, int64_t n, uint64_t bits) {
  if (bits == 0) {
    memset(dst, 0, (size_t)n * esize);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    memcpy((char *)dst + (size_t)i * esize, &bits, esize);
}

static rf_status *shape_op_compute(rf__kernel_ctx *ctx) {
  rf__shape_job job;
  RF_CHECK(rf__shape_job_prepare(ctx, &job));
  rf_status *st = NULL;
  rf_dtype dt = ctx->inputs[0]->dtype;
  size_t es = rf_dtype_size(dt);
  if (job.view_of >= 0) {
    st = rf__tensor_new_view(ctx->inputs[job.view_of], &job.out_shapes[0],
                             &ctx->outputs[0]);
    rf__shape_job_free(&job);
    return rf__kernel_error_at(ctx, st);
  }
  for (int i = 0; !st && i < job.num_outputs; i++) {
    rf_tensor *out;
    st = rf__kernel_alloc_output(ctx, i, dt, &job.out_shapes[i], &out);
    if (!st && job.fill) fill(out->data, es, out->num_elements, job.fill_bits);
  }
  for (int k = 0; !st && k < job.num_plans; k++) {
    const rf__copy_plan *p = &job.plans[k];
    run_plan(ctx, p, ctx->inputs[p->src_input]->data,
             ctx->outputs[p->dst_output]->data, es);
  }
  if (st) rf__kernel_drop_outputs(ctx);
  rf__shape_job_free(&job);
  return st;
}

/* ---- _TileGrad ---- */

typedef struct tile_grad_args {
  const rf_tensor *dy;
  rf_tensor *dx;
  const int64_t *m;
  int rank;
  int64_t tiles; /* product of the multiples */
  int64_t dy_strides[RF_MAX_RANK];
} tile_grad_args;

static uint64_t load_int(rf_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case RF_INT8: return (uint64_t)((const int8_t *)p)[i];
    case RF_UINT8: return ((const uint8_t *)p)[i];
    case RF_INT32: return (uint64_t)((const int32_t *)p)[i];
    default: return (uint64_t)((const int64_t *)p)[i];
  }
}

static void store_int(rf_dtype dt, void *p, int64_t i, uint64_t v) {
  switch (dt) {
    case RF_INT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case RF_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case RF_INT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = v; break;
  }
}

/* dx[j] = sum over tiles t of dy at (t_k * x_k + j_k): tiles in order. */
static void tile_grad_rows(void *arg, int64_t begin, int64_t end) {
  const tile_grad_args *a = arg;
  const rf_shape *xs = &a->dx->shape;
  rf_dtype dt = a->dy->dtype;
  bool fl = rf_dtype_is_float(dt);
  for (int64_t j = begin; j < end; j++) {
    int64_t base = 0, rest = j;
    for (int k = a->rank - 1; k >= 0; k--) {
      base += (rest % xs->dims[k]) * a->dy_strides[k];
      rest /= xs->dims[k];
    }
    double sum = 0;
    uint64_t isum = 0;
    for (int64_t t = 0; t < a->tiles; t++) {
      int64_t off = base, tr = t;
      for (int k = a->rank - 1; k >= 0; k--) {
        off += (tr % a->m[k]) * xs->dims[k] * a->dy_strides[k];
        tr /= a->m[k];
      }
      if (fl)
        sum += rf__float_load(dt, a->dy->data, off);
      else
        isum += load_int(dt, a->dy->data, off);
    }
    if (fl)
      rf__float_store(dt, a->dx->data, j, sum);
    else
      store_int(dt, a->dx->data, j, isum);
  }
}

static rf_status *tile_grad_compute(rf__kernel_ctx *ctx) {
  rf_shape shape;
  tile_grad_args a = {.dy = ctx->inputs[0]};
  RF_CHECK(rf__tile_grad_prepare(ctx, &shape, &a.m, &a.rank));
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, a.dy->dtype, &shape, &a.dx));
  if (a.dx->num_elements == 0) return NULL;
  a.tiles = 1;
  for (int k = 0; k < a.rank; k++) a.tiles *= a.m[k]; /* <= dy's count */
  rf__contiguous_strides(&a.dy->shape, a.dy_strides);
  rf__kernel_parallel_for(ctx, a.dx->num_elements, a.tiles * 4, tile_grad_rows,
                          &a);
  return NULL;
}

static const rf__kernel_def shape_kernels[] = {
    RF_SHAPE_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_shape_kernels(void) {
  return rf__kernel_register_all(
      shape_kernels, sizeof shape_kernels / sizeof shape_kernels[0]);
}
