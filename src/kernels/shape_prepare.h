/* kernels/shape_prepare.h - the device-independent half of the shape-op
 * kernels (kernels/cpu/shape_kernels.c, kernels/cuda/shape_kernels.cu):
 * every op of ops/shape_ops.c but _TileGrad is an optional fill of its
 * outputs plus strided copies, planned here from the run-time shapes with
 * the build-time rules (ops/shape_op_shapes.h), so a device only has to run
 * a plan. Usable from C and CUDA C++. */
#ifndef RF_KERNELS_SHAPE_PREPARE_H
#define RF_KERNELS_SHAPE_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel.h"

/* Tile's plan splits each dim in two (tile, offset in the tile). */
#define RF_COPY_MAX_RANK (2 * RF_MAX_RANK)

/* dst[dst_offset + sum_k i_k dst_strides[k]] =
 *   src[src_offset + sum_k i_k src_strides[k]] for every index i in dims
 * (row-major); strides and offsets in elements. Simplified: no dim of size
 * 1, adjacent dims contiguous in both merged; rank 0 is one element. */
typedef struct rf__copy_plan {
  int src_input, dst_output;
  int rank;
  int64_t count; /* elements: the product of dims */
  int64_t src_offset, dst_offset;
  int64_t dims[RF_COPY_MAX_RANK];
  int64_t src_strides[RF_COPY_MAX_RANK];
  int64_t dst_strides[RF_COPY_MAX_RANK];
} rf__copy_plan;

/* The ops the plans cover; the kernel lists of both devices come from it. */
#define RF_SHAPE_KERNELS(X)                                      \
  X("Transpose", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)    \
  X("Concat", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)       \
  X("Split", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)        \
  X("Slice", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)        \
  X("ExpandDims", shape_op_compute, 0, 0, RF_COST_CHEAP)         \
  X("Squeeze", shape_op_compute, 0, 0, RF_COST_CHEAP)            \
  X("Pad", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)          \
  X("Tile", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)         \
  X("_PadTo", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)       \
  X("_SliceTo", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)     \
  X("_SplitLike", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)   \
  X("_TileGrad", tile_grad_compute, 0, 0, RF_COST_PER_ELEMENT)   \
  X("StridedSlice", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("_StridedSliceGrad", shape_op_compute, 0, 0, RF_COST_PER_ELEMENT)

typedef struct rf__shape_job {
  int num_outputs;
  rf_shape *out_shapes; /* [num_outputs] */
  int view_of;          /* >= 0: output 0 is a view of this input */
  bool fill;            /* outputs start as fill_bits everywhere */
  uint64_t fill_bits;   /* one element, low bytes first */
  int num_plans;
  rf__copy_plan *plans; /* [num_plans], empty ones left out */
} rf__shape_job;

#ifdef __cplusplus
extern "C" {
#endif

/* Plans ctx's node (any op of RF_SHAPE_KERNELS but _TileGrad) from its
 * inputs' shapes. INVALID_ARGUMENT naming the node, op and device for
 * arguments that do not fit; RESOURCE_EXHAUSTED. On success free *job with
 * rf__shape_job_free. */
rf_status *rf__shape_job_prepare(rf__kernel_ctx *ctx, rf__shape_job *job);
void rf__shape_job_free(rf__shape_job *job);

/* _TileGrad(dy, like): *shape = like's (x's), checked against dy's;
 * multiples/rank: the attr. */
rf_status *rf__tile_grad_prepare(rf__kernel_ctx *ctx, rf_shape *shape,
                                 const int64_t **multiples, int *rank);

/* Row-major strides (in elements) of s into strides[0, rank). */
void rf__contiguous_strides(const rf_shape *s, int64_t *strides);

#ifdef __cplusplus
}
#endif

#endif
