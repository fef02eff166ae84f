/* kernels/cpu/reduce_sum.h - the CPU sum/mean engine behind Sum, Mean and
 * _BiasAddGrad: reduces any set of axes of a numeric tensor.
 *
 * Floats add in double (pairwise along contiguous rows); integers add in
 * uint64, so a sum wraps as two's complement with no undefined behaviour, and
 * an integer mean is the exact sum divided by the count, truncated toward zero.
 * Work is split into pieces that do not depend on the thread count, so every
 * run gives the same bits. */
#ifndef RF_KERNELS_CPU_REDUCE_SUM_H
#define RF_KERNELS_CPU_REDUCE_SUM_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel.h"

/* Vectorise the including file's loops at -O2 as well: GCC 12's default
 * "very cheap" cost model skips every loop that needs a scalar epilogue
 * (the math kernels do the same in math_kernels.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

/* Reduces x over the axes whose bit is set in mask into out, a tensor of x's
 * dtype whose elements are x's kept axes in row-major order (any shape with
 * that element count). mean divides by the number of elements reduced; an
 * integer mean over zero elements is INVALID_ARGUMENT, a float one is NaN.
 * RESOURCE_EXHAUSTED when scratch memory runs out. */
rf_status *rf__cpu_reduce_sum(rf__kernel_ctx *ctx, const rf_tensor *x,
                              uint32_t mask, bool mean, rf_tensor *out);

/* A shape seen as groups of axes: axes of length 1 dropped, neighbours that
 * are both reduced or both kept merged into one group of extent d[]. Scalars
 * and all-ones shapes give n = 0. */
typedef struct rf__axis_groups {
  int n;
  int64_t d[RF_MAX_RANK];
  bool reduced[RF_MAX_RANK];
} rf__axis_groups;

void rf__axis_groups_make(const rf_shape *s, uint32_t mask, rf__axis_groups *g);

#endif
