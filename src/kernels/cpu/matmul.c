/* kernels/cpu/matmul.c - MatMul on the CPU: C (m,n) = op(A) op(B), where op
 * transposes when the node's transpose_a/transpose_b say so.
 *
 * float32/float64 go to CBLAS (OpenBLAS), except float32 products (or
 * blocks of them) with a short side - few rows of A B, a short sum of A^T B
 * - which kernels/cpu/sgemm_small.c does without packing; float16/bfloat16
 * widen to float32, run sgemm and round once per element; int32/int64 use an
 * i-k-j loop over rows of C (B transposed first when needed so the inner loop
 * is contiguous) in unsigned arithmetic, which wraps instead of overflowing. */
#include <cblas.h>
#include <string.h>

#include "core/mem.h"
#include "kernels/cpu/math_kernels.h"
#include "kernels/cpu/sgemm_small.h"
#include "kernels/matmul_shape.h"
#include "device/device.h"

/* The product's sizes: kernels/matmul_shape.h. */
typedef rf__matmul_dims mm_dims;

/* ldc: row length of C as stored (n, or more for a block of C's columns) */
static void sgemm(const mm_dims *d, const float *a, const float *b, float *c,
                  int64_t ldc) {
  if (rf__sgemm_small_fits(d)) {
    rf__sgemm_small(d, a, b, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, d->ta ? CblasTrans : CblasNoTrans,
              d->tb ? CblasTrans : CblasNoTrans, (int)d->m, (int)d->n,
              (int)d->k, 1.0f, a, (int)d->lda, b, (int)d->ldb, 0.0f, c,
              (int)ldc);
}

static void dgemm(const mm_dims *d, const double *a, const double *b, double *c,
                  int64_t ldc) {
  cblas_dgemm(CblasRowMajor, d->ta ? CblasTrans : CblasNoTrans,
              d->tb ? CblasTrans : CblasNoTrans, (int)d->m, (int)d->n,
              (int)d->k, 1.0, a, (int)d->lda, b, (int)d->ldb, 0.0, c, (int)ldc);
}

/* ---- blocks of C across the pool ---- */

/* OpenBLAS runs single-threaded inside ringflow (blas_threads.c), so a big
 * product is split into blocks of C, one BLAS call each: one block per pool
 * thread, since small blocks run sgemm below its speed (`ringflow train` on 2
 * cores, against 4 blocks per thread: 1.1-1.25x the samples/s at batch 256
 * and 1024, on 1 and on 4 devices). Every call packs the whole of the operand
 * it shares with the other blocks again, so C is split along its longer
 * side: blocks of rows share op(B) (k x n), blocks of columns share op(A)
 * (m x k), and a wide C (n > m: a layer's forward product at a small batch,
 * where op(B) is the weight matrix) repacks the small op(A) instead of the
 * weights. Products too small to pay for the handoff stay whole. Block
 * bounds depend only on the shape and the pool size, so results do not vary
 * from run to run. */
#define MIN_BLOCK 32
#define MIN_SPLIT_MACS 1000000

typedef struct gemm_job {
  const mm_dims *d;
  const void *a, *b;
  void *c;
  bool f64, by_cols;
  int64_t per; /* rows or columns per block */
} gemm_job;

static void gemm_blocks(void *arg, int64_t blk0, int64_t blk1) {
  const gemm_job *j = arg;
  mm_dims sub = *j->d;
  int64_t s0 = blk0 * j->per, s1 = blk1 * j->per;
  int64_t a_off = 0, b_off = 0, c_off;
  if (j->by_cols) {
    if (s1 > sub.n) s1 = sub.n;
    sub.n = s1 - s0;
    /* op(B)'s column c is B's column c, or B's row c when transposed */
    b_off = sub.tb ? s0 * sub.ldb : s0;
    c_off = s0;
  } else {
    if (s1 > sub.m) s1 = sub.m;
    sub.m = s1 - s0;
    /* op(A)'s row r is A's row r, or A's column r when transposed */
    a_off = sub.ta ? s0 : s0 * sub.lda;
    c_off = s0 * sub.n;
  }
  if (j->f64)
    dgemm(&sub, (const double *)j->a + a_off, (const double *)j->b + b_off,
          (double *)j->c + c_off, j->d->n);
  else
    sgemm(&sub, (const float *)j->a + a_off, (const float *)j->b + b_off,
          (float *)j->c + c_off, j->d->n);
}

static void gemm_parallel(rf__kernel_ctx *ctx, const mm_dims *d, const void *a,
                          const void *b, void *c, bool f64) {
  bool by_cols = d->n > d->m;
  int64_t side = by_cols ? d->n : d->m, other = by_cols ? d->m : d->n;
  int64_t blocks = side / MIN_BLOCK;
  int64_t threads = ctx->device && ctx->device->pool
                        ? rf__threadpool_size(ctx->device->pool)
                        : 1;
  if (blocks > threads) blocks = threads;
  if (blocks < 1 || (double)d->m * (double)d->n * (double)d->k < MIN_SPLIT_MACS)
    blocks = 1;
  gemm_job job = {d, a, b, c, f64, by_cols, (side + blocks - 1) / blocks};
  rf__kernel_parallel_for(ctx, blocks, job.per * d->k * other, gemm_blocks,
                          &job);
}

/* ---- float16 / bfloat16 through sgemm ---- */

static void widen(const uint16_t *x, float *y, int64_t n, rf_dtype dt) {
  if (dt == RF_FLOAT16) {
    for (int64_t i = 0; i < n; i++) y[i] = rf__h2f(x[i]);
  } else {
    for (int64_t i = 0; i < n; i++) y[i] = rf__bf2f(x[i]);
  }
}

static void narrow(const float *x, uint16_t *y, int64_t n, rf_dtype dt) {
  if (dt == RF_FLOAT16) {
    for (int64_t i = 0; i < n; i++) y[i] = rf__f2h(x[i]);
  } else {
    for (int64_t i = 0; i < n; i++) y[i] = rf__f2bf(x[i]);
  }
}

/* buf holds na + nb + nc floats. */
static void gemm_16(const mm_dims *d, const rf_tensor *a, const rf_tensor *b,
                    rf_tensor *c, float *buf) {
  int64_t na = a->num_elements, nb = b->num_elements;
  widen(a->data, buf, na, a->dtype);
  widen(b->data, buf + na, nb, b->dtype);
  sgemm(d, buf, buf + na, buf + na + nb, d->n);
  narrow(buf + na + nb, c->data, c->num_elements, c->dtype);
}

/* ---- integers: rows of C in parallel ---- */

typedef struct int_job {
  const mm_dims *d;
  const void *a, *bt; /* bt: B as (k, n), row-major */
  void *c;
} int_job;

/* c[i,:] = sum_k op(A)[i,k] * Bt[k,:] for rows [begin, end). */
#define INT_ROWS_FN(sfx, T, UT)                                       \
  static void rows_##sfx(void *arg, int64_t begin, int64_t end) {     \
    const int_job *j = arg;                                           \
    const mm_dims *d = j->d;                                          \
    const T *a = j->a;                                                \
    const T *bt = j->bt;                                              \
    T *c = j->c;                                                      \
    for (int64_t i = begin; i < end; i++) {                           \
      UT *restrict ci = (UT *)(c + i * d->n);                         \
      memset(ci, 0, sizeof(T) * (size_t)d->n);                        \
      for (int64_t k = 0; k < d->k; k++) {                            \
        UT aik = (UT)(d->ta ? a[k * d->lda + i] : a[i * d->lda + k]); \
        const UT *restrict bk = (const UT *)(bt + k * d->n);          \
        for (int64_t jj = 0; jj < d->n; jj++) ci[jj] += aik * bk[jj]; \
      }                                                               \
    }                                                                 \
  }
INT_ROWS_FN(i32, int32_t, uint32_t)
INT_ROWS_FN(i64, int64_t, uint64_t)

/* dst (k, n) = src (n, k) transposed. */
static void transpose(const char *src, char *dst, int64_t n, int64_t k,
                      size_t esize) {
  for (int64_t r = 0; r < n; r++)
    for (int64_t q = 0; q < k; q++)
      memcpy(dst + (size_t)(q * n + r) * esize,
             src + (size_t)(r * k + q) * esize, esize);
}

/* bt: room for B's elements when d->tb, else NULL. */
static void gemm_int(rf__kernel_ctx *ctx, const mm_dims *d, const rf_tensor *a,
                     const rf_tensor *b, rf_tensor *c, void *bt) {
  if (d->tb) transpose(b->data, bt, d->n, d->k, rf_dtype_size(b->dtype));
  int_job job = {d, a->data, d->tb ? bt : b->data, c->data};
  rf__kernel_parallel_for(ctx, d->m, d->k * d->n,
                          a->dtype == RF_INT32 ? rows_i32 : rows_i64, &job);
}

/* Bytes of scratch the dtype's path needs (0: none). */
static size_t scratch_bytes(const mm_dims *d, const rf_tensor *a,
                            const rf_tensor *b) {
  if (a->dtype == RF_FLOAT16 || a->dtype == RF_BFLOAT16)
    return sizeof(float) *
           (size_t)(a->num_elements + b->num_elements + d->m * d->n);
  if ((a->dtype == RF_INT32 || a->dtype == RF_INT64) && d->tb)
    return rf_dtype_size(b->dtype) * (size_t)b->num_elements;
  return 0;
}

/* ---- the kernel ---- */

static rf_status *matmul_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  mm_dims d;
  rf_shape cs;
  RF_CHECK(rf__matmul_prepare(ctx, &d, &cs));
  rf_dtype dt = a->dtype;
  if (d.m == 0 || d.n == 0 || d.k == 0) {
    /* Nothing to multiply; an empty sum is 0 (all-zero bits in every dtype),
     * and BLAS would reject the zero leading dimensions. */
    rf_tensor *c;
    RF_CHECK(rf__kernel_alloc_output(ctx, 0, dt, &cs, &c));
    memset(c->data, 0, c->nbytes);
    return NULL;
  }
  /* Scratch first, so a failure leaves no output behind. */
  size_t sbytes = scratch_bytes(&d, a, b);
  void *scratch = sbytes ? rf__malloc(sbytes) : NULL;
  if (sbytes && !scratch) return rf__oom();
  rf_tensor *c;
  rf_status *st = rf__kernel_alloc_output(ctx, 0, dt, &cs, &c);
  if (st) {
    rf__free(scratch);
    return st;
  }
  switch (dt) {
    case RF_FLOAT32:
      gemm_parallel(ctx, &d, a->data, b->data, c->data, false);
      break;
    case RF_FLOAT64:
      gemm_parallel(ctx, &d, a->data, b->data, c->data, true);
      break;
    case RF_FLOAT16:
    case RF_BFLOAT16: gemm_16(&d, a, b, c, scratch); break;
    default: gemm_int(ctx, &d, a, b, c, scratch); break;
  }
  rf__free(scratch);
  return NULL;
}

static const rf__kernel_def matmul_kernel = {
    .op = "MatMul", .device_type = RF_DEVICE_CPU, .compute = matmul_compute};

rf_status *rf__register_cpu_matmul_kernels(void) {
  return rf__kernel_register(&matmul_kernel);
}
