/* kernels/cpu/sgemm_small.h - float32 products with one short side, without
 * BLAS's packing: the forward product of a few rows (C = A B, m small) and
 * the weight gradient of a few rows (C = A^T B, k small). */
#ifndef RF_KERNELS_CPU_SGEMM_SMALL_H
#define RF_KERNELS_CPU_SGEMM_SMALL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/matmul_shape.h"

/* Rows of C (A B) and rows of B (A^T B) up to which rf__sgemm_small takes
 * a product: where it measured faster than OpenBLAS (sgemm_small.c). */
#define RF_SGEMM_SMALL_M 64
#define RF_SGEMM_SMALL_K 16

/* Whether rf__sgemm_small takes products of d's shape on this CPU. */
bool rf__sgemm_small_fits(const rf__matmul_dims *d);

/* C (d->m x d->n, rows ldc apart) = op(A) op(B), for a shape that
 * rf__sgemm_small_fits. Each element of C is a sum over k in increasing
 * order (one fused multiply-add per term), so the result does not depend on
 * how C is split into blocks. */
void rf__sgemm_small(const rf__matmul_dims *d, const float *a, const float *b,
                     float *c, int64_t ldc);

#endif
