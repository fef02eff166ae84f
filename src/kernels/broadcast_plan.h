/* kernels/broadcast_plan.h - numpy broadcasting as the kernels walk it, for
 * the CPU loops (kernels/cpu/elementwise_binary.c) and the GPU index
 * arithmetic (kernels/cuda/broadcast.cuh) alike: size-1 output dims dropped
 * and neighbouring dims merged while both operands stay linear across them,
 * so same-shape and scalar cases become one flat run. Usable from C and
 * CUDA C++ (the GPU passes a plan to its kernels by value). */
#ifndef RF_KERNELS_BROADCAST_PLAN_H
#define RF_KERNELS_BROADCAST_PLAN_H

#include <stdint.h>

#include "ringflow/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf__broadcast_plan {
  int rank; /* >= 1 */
  int64_t dims[RF_MAX_RANK];
  int64_t sa[RF_MAX_RANK]; /* element strides; 0 where broadcast */
  int64_t sb[RF_MAX_RANK];
} rf__broadcast_plan;

/* The plan for operands of shapes as and bs (each broadcastable to os)
 * producing os. One element (or none) gives rank 1 with dims[0] = 1. */
void rf__broadcast_plan_make(const rf_shape *as, const rf_shape *bs,
                             const rf_shape *os, rf__broadcast_plan *p);

#ifdef __cplusplus
}
#endif

#endif
