/* kernels/reduction_prepare.h - the device-independent half of the reduction
 * kernels (kernels/cpu/reduction_kernels.c, kernels/cuda/...): the argument
 * checks, with the messages both devices give, and the reduced axes and
 * output shapes. Axes are re-checked against the run-time rank with the
 * shape functions' helpers (ops/reduction_axes.h), so build time and run
 * time reject the same axes alike. Usable from C and CUDA C++. */
#ifndef RF_KERNELS_REDUCTION_PREPARE_H
#define RF_KERNELS_REDUCTION_PREPARE_H

#include <stdint.h>

#include "kernels/kernel.h"

/* The family's kernels (RF__KERNEL_ROW). */
#define RF_REDUCTION_KERNELS(X)                              \
  X("Sum", sum_compute, 0, 0, RF_COST_PER_ELEMENT)           \
  X("Mean", mean_compute, 0, 0, RF_COST_PER_ELEMENT)         \
  X("ArgMax", argmax_compute, 0, 0, RF_COST_PER_ELEMENT)     \
  X("_SumGrad", sum_grad_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("_MeanGrad", mean_grad_compute, 0, 0, RF_COST_PER_ELEMENT)

#ifdef __cplusplus
extern "C" {
#endif

/* Sum, Mean (x): x numeric; *mask = the reduced axes of x, *out_shape the
 * result's (keep_dims applied). */
rf_status *rf__reduce_prepare(rf__kernel_ctx *ctx, uint32_t *mask,
                              rf_shape *out_shape);
/* _SumGrad, _MeanGrad (dy, x): x numeric, dy of x's dtype and of x's shape
 * reduced; *mask = the reduced axes of x. */
rf_status *rf__reduce_grad_prepare(rf__kernel_ctx *ctx, uint32_t *mask);

/* ArgMax over one axis: x seen as (outer, n, inner). */
typedef struct rf__argmax_dims {
  int axis; /* in [0, rank) */
  int64_t outer, n, inner;
} rf__argmax_dims;

/* ArgMax (x): x numeric (else UNIMPLEMENTED) of rank >= 1, the node's axis
 * in [-rank, rank), and no empty axis unless the result is empty too.
 * *out_shape = x's without the axis (the int64 result's). */
rf_status *rf__argmax_prepare(rf__kernel_ctx *ctx, rf__argmax_dims *d,
                              rf_shape *out_shape);

#ifdef __cplusplus
}
#endif

#endif
