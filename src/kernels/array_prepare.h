/* kernels/array_prepare.h - the device-independent half of the array kernels
 * (kernels/cpu/array_kernels.c, kernels/cuda/array_kernels.cu): the kernels
 * that touch no element (Placeholder, Identity, NoOp, Reshape's view,
 * Shape's host vector) and the argument checks and output shapes of the
 * others, with the messages both devices give. `on_gpu`: the kernel runs
 * on a GPU device. Usable from C and CUDA C++. */
#ifndef RF_KERNELS_ARRAY_PREPARE_H
#define RF_KERNELS_ARRAY_PREPARE_H

#include <stdbool.h>

#include "kernels/kernel.h"

/* The family's kernels but Const (RF__KERNEL_ROW; Const has an init):
 * Reshape's shape, Shape's output and Fill's dims are host memory. */
#define RF_ARRAY_KERNELS(X)                                      \
  X("Placeholder", rf__placeholder_compute, 0, 0, RF_COST_CHEAP) \
  X("Identity", rf__identity_compute, 0, 0, RF_COST_CHEAP)       \
  X("NoOp", rf__noop_compute, 0, 0, RF_COST_CHEAP)               \
  X("Reshape", reshape_compute, 1u << 1, 0, RF_COST_CHEAP)       \
  X("Shape", shape_compute, 0, 1u << 0, RF_COST_CHEAP)           \
  X("Fill", fill_compute, 1u << 0, 0, RF_COST_EXPENSIVE)         \
  X("ZerosLike", zeros_like_compute, 0, 0, RF_COST_PER_ELEMENT)  \
  X("OnesLike", ones_like_compute, 0, 0, RF_COST_PER_ELEMENT)

#ifdef __cplusplus
extern "C" {
#endif

/* Const's value: the node's "value" attr tensor (borrowed), or an error
 * naming the node when the attr holds none. */
rf_status *rf__const_value(const rf_node *node, rf_tensor **value);

/* A fed placeholder is replaced by an _Arg node, so running one means it
 * was not fed: INVALID_ARGUMENT naming its dtype and shape. */
rf_status *rf__placeholder_compute(rf__kernel_ctx *ctx);
/* Input 0 passed through, no copy. */
rf_status *rf__identity_compute(rf__kernel_ctx *ctx);
rf_status *rf__noop_compute(rf__kernel_ctx *ctx);
/* Reshape(x, shape): a view of x's buffer (tensors are immutable; the view
 * keeps the buffer alive). The shape input is host memory. */
rf_status *rf__reshape_compute(rf__kernel_ctx *ctx);
/* Shape(x): x's dims as a host vector of the node's out_type; only x's
 * shape is read. INVALID_ARGUMENT when a dim does not fit int32. */
rf_status *rf__shape_compute(rf__kernel_ctx *ctx, bool on_gpu);

/* Fill(dims, value): dims (host memory) a valid shape, value a scalar;
 * *shape = the output's. */
rf_status *rf__fill_prepare(rf__kernel_ctx *ctx, rf_shape *shape);

#ifdef __cplusplus
}
#endif

#endif
