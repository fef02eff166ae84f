/* kernels/matmul_shape.h - MatMul's argument checks and sizes, shared by the
 * CPU and GPU kernels (kernels/cpu/matmul.c, kernels/cuda/matmul.cu) so both
 * reject the same operands with the same message. C (m,n) = op(A) op(B),
 * op transposing when transpose_a / transpose_b say so; every dimension fits
 * BLAS's int. Usable from C and CUDA C++ (the GPU passes the dims to its
 * integer kernel by value). */
#ifndef RF_KERNELS_MATMUL_SHAPE_H
#define RF_KERNELS_MATMUL_SHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf__matmul_dims {
  bool ta, tb;
  int64_t m, n, k;
  int64_t lda, ldb; /* row lengths of A and B as stored */
} rf__matmul_dims;

/* Reads the node's transpose attrs and checks inputs a and b: one dtype,
 * rank 2, inner dimensions equal, each dimension within int (else
 * UNIMPLEMENTED), a dtype with a kernel (the floats, int32, int64; else
 * UNIMPLEMENTED). Fills *d and *c_shape = (m, n). */
rf_status *rf__matmul_prepare(rf__kernel_ctx *ctx, rf__matmul_dims *d,
                              rf_shape *c_shape);

#ifdef __cplusplus
}
#endif

#endif
