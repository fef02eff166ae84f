/* kernels/batch_matmul_plan.h - BatchMatMul's run-time plan, shared by the
 * CPU and GPU kernels (kernels/cpu/batch_matmul.c,
 * kernels/cuda/batch_matmul.cu): output shape, GEMM sizes, and where each
 * output batch's x and y matrices start (batch dims broadcast). Checks come
 * from ops/linalg_shapes.h; every GEMM size must fit BLAS's int. Usable from
 * C and CUDA C++. */
#ifndef RF_KERNELS_BATCH_MATMUL_PLAN_H
#define RF_KERNELS_BATCH_MATMUL_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel.h"

typedef struct rf__bmm_plan {
  rf_shape out;
  bool ax, ay;
  int64_t batch, m, n, k;
  int64_t lda, ldb; /* row lengths of x's and y's matrices as stored */
  int brank;        /* batch dims of out */
  int64_t bdims[RF_MAX_RANK];
  int64_t xstr[RF_MAX_RANK], ystr[RF_MAX_RANK]; /* elements; 0: broadcast */
  /* Each operand's batch is whole (stride m*k / k*n per batch) or one
   * matrix for all (0): then one strided-batched call does every batch. */
  bool strided;
  int64_t xstride, ystride;
} rf__bmm_plan;

#ifdef __cplusplus
extern "C" {
#endif

/* INVALID_ARGUMENT / UNIMPLEMENTED naming the node, op and device. */
rf_status *rf__bmm_plan_make(rf__kernel_ctx *ctx, rf__bmm_plan *p);

/* Element offsets of batch b's x and y matrices. */
void rf__bmm_offsets(const rf__bmm_plan *p, int64_t b, int64_t *xo,
                     int64_t *yo);

#ifdef __cplusplus
}
#endif

#endif
