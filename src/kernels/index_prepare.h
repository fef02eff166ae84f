/* kernels/index_prepare.h - the device-independent half of the index-op
 * kernels (kernels/cpu/index_kernels.c, kernels/cuda/index_kernels.cu):
 * argument checks, output shapes and loop bounds of Gather, _GatherGrad,
 * OneHot and Select, from the build-time rules (ops/index_shapes.h). Usable
 * from C and CUDA C++. */
#ifndef RF_KERNELS_INDEX_PREPARE_H
#define RF_KERNELS_INDEX_PREPARE_H

#include <stdint.h>

#include "kernels/kernel.h"

#define RF_INDEX_KERNELS(X)                                        \
  X("Gather", gather_compute, 0, 0, RF_COST_PER_ELEMENT)           \
  X("_GatherGrad", gather_grad_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("OneHot", one_hot_compute, 0, 0, RF_COST_PER_ELEMENT)          \
  X("Select", select_compute, 0, 0, RF_COST_PER_ELEMENT)

/* Gather viewed as (outer, n, inner) params, k indices, (outer, k, inner)
 * output. */
typedef struct rf__gather_dims {
  rf_shape out;
  int64_t outer, n, inner, k;
} rf__gather_dims;

/* OneHot viewed as (outer, inner) indices, (outer, depth, inner) output. */
typedef struct rf__one_hot_dims {
  rf_shape out;
  int64_t outer, depth, inner;
  uint64_t on_bits, off_bits; /* one element of the output dtype */
} rf__one_hot_dims;

/* Select: element strides of condition, t, e over the output's dims (0
 * where broadcast). */
typedef struct rf__select_plan {
  rf_shape out;
  int64_t count;
  int rank;
  int64_t dims[RF_MAX_RANK];
  int64_t strides[3][RF_MAX_RANK];
} rf__select_plan;

#ifdef __cplusplus
extern "C" {
#endif

/* Gather (params input 0) or _GatherGrad (params' shape from input 2, the
 * output's shape; dy input 0 must match the gather's). */
rf_status *rf__gather_prepare(rf__kernel_ctx *ctx, rf__gather_dims *d);
rf_status *rf__one_hot_prepare(rf__kernel_ctx *ctx, rf__one_hot_dims *d);
rf_status *rf__select_prepare(rf__kernel_ctx *ctx, rf__select_plan *p);

#ifdef __cplusplus
}
#endif

#endif
