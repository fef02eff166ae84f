/* kernels/math_prepare.h - the device-independent half of the elementwise
 * math kernels (kernels/cpu/{elementwise_binary,elementwise_nary,
 * sum_to_shape}.c and their kernels/cuda twins): argument checks, with the
 * messages both devices give, and output shapes. A `*done` result means the
 * output is already set (input 0 passed through, no copy): the kernel has
 * nothing left to do. Usable from C and CUDA C++. */
#ifndef RF_KERNELS_MATH_PREPARE_H
#define RF_KERNELS_MATH_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel.h"

/* The kernels of elementwise_binary and elementwise_nary (RF__KERNEL_ROW). */
#define RF_BINARY_KERNELS(X)                           \
  X("Add", add_compute, 0, 0, RF_COST_PER_ELEMENT)     \
  X("Sub", sub_compute, 0, 0, RF_COST_PER_ELEMENT)     \
  X("Mul", mul_compute, 0, 0, RF_COST_PER_ELEMENT)     \
  X("Div", div_compute, 0, 0, RF_COST_PER_ELEMENT)     \
  X("Equal", equal_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("_BroadcastToShapeOf", broadcast_to_compute, 0, 0, RF_COST_PER_ELEMENT)
#define RF_NARY_KERNELS(X)                         \
  X("Neg", neg_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("AddN", add_n_compute, 0, 0, RF_COST_PER_ELEMENT)

#ifdef __cplusplus
extern "C" {
#endif

/* Add, Sub, Mul, Div, Equal (named op): operands of one numeric dtype (or
 * bool, for a `compare` op: Equal) whose shapes broadcast to *out_shape. */
rf_status *rf__binary_prepare(rf__kernel_ctx *ctx, const char *op, bool compare,
                              rf_shape *out_shape);
/* _BroadcastToShapeOf(x, like): x's shape broadcasts to like's, which
 * *out_shape gets. */
rf_status *rf__broadcast_to_prepare(rf__kernel_ctx *ctx, rf_shape *out_shape,
                                    bool *done);
/* Neg(x): x numeric, not uint8. */
rf_status *rf__neg_prepare(rf__kernel_ctx *ctx);
/* AddN: inputs of one shape and one numeric dtype. */
rf_status *rf__add_n_prepare(rf__kernel_ctx *ctx, bool *done);
/* _SumToShapeOf(x, like): like's shape broadcasts to x's; x numeric.
 * *mask (optional) = the axes of x summed away (those like lacks or has as
 * 1). */
rf_status *rf__sum_to_shape_prepare(rf__kernel_ctx *ctx, uint32_t *mask,
                                    bool *done);

#ifdef __cplusplus
}
#endif

#endif
