/* kernels/cpu/batch_matmul.c - BatchMatMul on the CPU: one OpenBLAS
 * sgemm/dgemm per output batch (kernels/batch_matmul_plan.h says where each
 * batch's matrices start), batches split over the device's pool (OpenBLAS
 * runs single-threaded inside ringflow); float16/bfloat16 widen to float32,
 * multiply and round once per element; int32/int64 sum in their unsigned
 * type, so they wrap around (two's complement) as MatMul's do. */
#include <cblas.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "kernels/batch_matmul_plan.h"
#include "kernels/cpu/half.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"

typedef struct bmm_job {
  const rf__bmm_plan *p;
  const void *x, *y;
  void *out;
  bool f64;
} bmm_job;

static void bmm_batches(void *arg, int64_t begin, int64_t end) {
  const bmm_job *j = arg;
  const rf__bmm_plan *p = j->p;
  CBLAS_TRANSPOSE ta = p->ax ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = p->ay ? CblasTrans : CblasNoTrans;
  for (int64_t b = begin; b < end; b++) {
    int64_t xo, yo, co = b * p->m * p->n;
    rf__bmm_offsets(p, b, &xo, &yo);
    if (j->f64)
      cblas_dgemm(CblasRowMajor, ta, tb, (int)p->m, (int)p->n, (int)p->k, 1.0,
                  (const double *)j->x + xo, (int)p->lda,
                  (const double *)j->y + yo, (int)p->ldb, 0.0,
                  (double *)j->out + co, (int)p->n);
    else
      cblas_sgemm(CblasRowMajor, ta, tb, (int)p->m, (int)p->n, (int)p->k, 1.0f,
                  (const float *)j->x + xo, (int)p->lda,
                  (const float *)j->y + yo, (int)p->ldb, 0.0f,
                  (float *)j->out + co, (int)p->n);
  }
}

/* Integer batches [begin, end): c[i, j] = sum_q op(X)[i, q] op(Y)[q, j]. */
#define INT_BATCHES_FN(sfx, T, UT)                                       \
  static void int_batches_##sfx(void *arg, int64_t begin, int64_t end) { \
    const bmm_job *j = arg;                                              \
    const rf__bmm_plan *p = j->p;                                        \
    for (int64_t b = begin; b < end; b++) {                              \
      int64_t xo, yo;                                                    \
      rf__bmm_offsets(p, b, &xo, &yo);                                   \
      const T *x = (const T *)j->x + xo, *y = (const T *)j->y + yo;      \
      T *c = (T *)j->out + b * p->m * p->n;                              \
      for (int64_t i = 0; i < p->m; i++)                                 \
        for (int64_t jj = 0; jj < p->n; jj++) {                          \
          UT s = 0;                                                      \
          for (int64_t q = 0; q < p->k; q++)                             \
            s += (UT)(p->ax ? x[q * p->lda + i] : x[i * p->lda + q]) *   \
                 (UT)(p->ay ? y[jj * p->ldb + q] : y[q * p->ldb + jj]);  \
          c[i * p->n + jj] = (T)s;                                       \
        }                                                                \
    }                                                                    \
  }
INT_BATCHES_FN(i32, int32_t, uint32_t)
INT_BATCHES_FN(i64, int64_t, uint64_t)

static float *widen(const rf_tensor *t) {
  float *f = rf__malloc(sizeof *f * (size_t)(t->num_elements + 1));
  const uint16_t *h = t->data;
  for (int64_t i = 0; f && i < t->num_elements; i++)
    f[i] = t->dtype == RF_FLOAT16 ? rf__h2f(h[i]) : rf__bf2f(h[i]);
  return f;
}

static rf_status *batch_matmul_compute(rf__kernel_ctx *ctx) {
  rf__bmm_plan p;
  RF_CHECK(rf__bmm_plan_make(ctx, &p));
  const rf_tensor *x = ctx->inputs[0], *y = ctx->inputs[1];
  rf_dtype dt = x->dtype;
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, dt, &p.out, &out));
  if (out->num_elements == 0) return NULL;
  if (p.k == 0) { /* an empty sum: all-zero bits are 0 in every dtype */
    memset(out->data, 0, out->nbytes);
    return NULL;
  }
  bmm_job j = {&p, x->data, y->data, out->data, dt == RF_FLOAT64};
  int64_t cost = p.m * p.n * p.k + 16;
  if (dt == RF_FLOAT32 || dt == RF_FLOAT64) {
    rf__kernel_parallel_for(ctx, p.batch, cost, bmm_batches, &j);
    return NULL;
  }
  if (dt == RF_INT32 || dt == RF_INT64) {
    rf__kernel_parallel_for(ctx, p.batch, cost,
                            dt == RF_INT32 ? int_batches_i32 : int_batches_i64,
                            &j);
    return NULL;
  }
  float *fx = widen(x), *fy = widen(y);
  float *fo = rf__malloc(sizeof *fo * (size_t)out->num_elements);
  rf_status *st = NULL;
  if (!fx || !fy || !fo) {
    rf__kernel_drop_outputs(ctx);
    st = rf__oom();
  } else {
    j.x = fx, j.y = fy, j.out = fo;
    rf__kernel_parallel_for(ctx, p.batch, cost, bmm_batches, &j);
    uint16_t *h = out->data;
    for (int64_t i = 0; i < out->num_elements; i++)
      h[i] = dt == RF_FLOAT16 ? rf__f2h(fo[i]) : rf__f2bf(fo[i]);
  }
  rf__free(fx);
  rf__free(fy);
  rf__free(fo);
  return st;
}

static const rf__kernel_def defs[] = {{.op = "BatchMatMul",
                                       .device_type = RF_DEVICE_CPU,
                                       .compute = batch_matmul_compute}};

rf_status *rf__register_cpu_linalg_kernels(void) {
  return rf__kernel_register_all(defs, 1);
}
