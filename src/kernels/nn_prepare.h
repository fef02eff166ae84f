/* kernels/nn_prepare.h - the device-independent half of the nn kernels
 * (kernels/cpu/{nn,activation}_kernels.c, kernels/cuda/...): each op's
 * argument checks, with the messages both devices give, and the sizes its
 * kernels need. On success the inputs are safe to read as the op's types
 * and shapes; the kernels then only allocate outputs and compute. Every op
 * but the activations works on rows of the last axis; *c gets the row
 * length. Usable from C and CUDA C++. */
#ifndef RF_KERNELS_NN_PREPARE_H
#define RF_KERNELS_NN_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel.h"

/* The family's kernels (RF__KERNEL_ROW): nn_kernels and the activations. */
#define RF_NN_KERNELS(X)                                              \
  X("BiasAdd", bias_add_compute, 0, 0, RF_COST_PER_ELEMENT)           \
  X("_BiasAddGrad", bias_add_grad_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("Softmax", softmax_compute, 0, 0, RF_COST_PER_ELEMENT)            \
  X("_SoftmaxGrad", softmax_grad_compute, 0, 0, RF_COST_PER_ELEMENT)  \
  X("SparseSoftmaxCrossEntropyWithLogits", xent_compute, 0, 0,        \
    RF_COST_PER_ELEMENT)                                              \
  X("_SparseXentGrad", xent_grad_compute, 0, 0, RF_COST_PER_ELEMENT)  \
  X("_SparseXentWithGrad", xent_with_grad_compute, 0, 0, RF_COST_PER_ELEMENT)
#define RF_ACTIVATION_KERNELS(X)                                     \
  X("Relu", relu_compute, 0, 0, RF_COST_PER_ELEMENT)                 \
  X("Sigmoid", sigmoid_compute, 0, 0, RF_COST_PER_ELEMENT)           \
  X("Tanh", tanh_compute, 0, 0, RF_COST_PER_ELEMENT)                 \
  X("_ReluGrad", relu_grad_compute, 0, 0, RF_COST_PER_ELEMENT)       \
  X("_SigmoidGrad", sigmoid_grad_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("_TanhGrad", tanh_grad_compute, 0, 0, RF_COST_PER_ELEMENT)

#ifdef __cplusplus
extern "C" {
#endif

/* BiasAdd(value, bias): one float dtype, value of rank >= 1, bias (c). */
rf_status *rf__bias_add_prepare(rf__kernel_ctx *ctx, int64_t *c);
/* _BiasAddGrad(out_backprop): float, rank >= 1. *shape = (c), the output's;
 * *mask = the axes summed (all but the last). */
rf_status *rf__bias_add_grad_prepare(rf__kernel_ctx *ctx, rf_shape *shape,
                                     uint32_t *mask);
/* Softmax(logits): float, rank >= 1. */
rf_status *rf__softmax_prepare(rf__kernel_ctx *ctx, int64_t *c);
/* _SoftmaxGrad(grad_softmax, softmax): one float dtype and one shape, rank
 * >= 1. */
rf_status *rf__softmax_grad_prepare(rf__kernel_ctx *ctx, int64_t *c);
/* SparseSoftmaxCrossEntropyWithLogits(logits (b, c), labels (b)): float
 * logits, int32 or int64 labels; *loss_shape = (b). The label values are
 * the kernels' to check (the CPU rejects one outside [0, c), the GPU gives
 * its row NaN). */
rf_status *rf__xent_prepare(rf__kernel_ctx *ctx, rf_shape *loss_shape,
                            int64_t *c);
/* _SparseXentGrad(dloss (b), backprop (b, c)): one float dtype. */
rf_status *rf__xent_grad_prepare(rf__kernel_ctx *ctx, int64_t *c);
/* _SparseXentWithGrad(logits (b, c), labels (b), dloss (b)): as
 * rf__xent_prepare, and dloss of the logits' dtype, one value a row. */
rf_status *rf__xent_with_grad_prepare(rf__kernel_ctx *ctx, rf_shape *loss_shape,
                                      int64_t *c);

/* Relu, Sigmoid, Tanh and their gradients: a float input (with `ints`, as
 * for Relu and _ReluGrad, int8/int32/int64 too; else UNIMPLEMENTED "no
 * <device> kernel for <dtype>"), and a second input, if any, of the first's
 * dtype and shape. */
rf_status *rf__activation_prepare(rf__kernel_ctx *ctx, bool ints,
                                  const char *device);

#ifdef __cplusplus
}
#endif

#endif
