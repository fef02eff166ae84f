/* kernels/conv_prepare.h - the device-independent half of the convolution
 * and pooling kernels (kernels/cpu/{conv,pool}.c, kernels/cuda/{conv,pool}.cu):
 * each op's argument checks, with the messages both devices give, and the
 * window geometry (ops/conv_geometry.h) its kernels compute with. On success
 * the inputs are safe to read as the op's types and shapes. Usable from C
 * and CUDA C++. */
#ifndef RF_KERNELS_CONV_PREPARE_H
#define RF_KERNELS_CONV_PREPARE_H

#include "kernels/kernel.h"
#include "ops/conv_geometry.h"

/* The families' kernels (RF__KERNEL_ROW). The sizes inputs (int32 vectors)
 * are host memory on GPUs. */
#define RF_CONV_KERNELS(X)                                              \
  X("Conv2D", conv2d_compute, 0, 0, RF_COST_EXPENSIVE)                  \
  X("Conv2DBackpropInput", conv2d_backprop_input_compute, 1u << 0, 0,   \
    RF_COST_EXPENSIVE)                                                  \
  X("Conv2DBackpropFilter", conv2d_backprop_filter_compute, 1u << 1, 0, \
    RF_COST_EXPENSIVE)
#define RF_POOL_KERNELS(X)                                         \
  X("MaxPool", max_pool_compute, 0, 0, RF_COST_EXPENSIVE)          \
  X("MaxPoolGrad", max_pool_grad_compute, 0, 0, RF_COST_EXPENSIVE) \
  X("AvgPool", avg_pool_compute, 0, 0, RF_COST_EXPENSIVE)          \
  X("AvgPoolGrad", avg_pool_grad_compute, 1u << 0, 0, RF_COST_EXPENSIVE)

#ifdef __cplusplus
extern "C" {
#endif

/* Conv2D(input, filter): float32/float64 (GPUs: also float16/bfloat16;
 * CPUs: UNIMPLEMENTED for those), both rank 4, the filter's in_channels
 * (dim 2, or 3 with filter_format OHWI: g->ohwi) the input's channels. */
rf_status *rf__conv2d_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g);
/* Conv2DBackpropInput(input_sizes, filter, out_backprop): the output is
 * (g->n, g->h, g->w, g->c); out_backprop must be (n, oh, ow, oc). */
rf_status *rf__conv2d_backprop_input_prepare(rf__kernel_ctx *ctx,
                                             rf__conv_geom *g);
/* Conv2DBackpropFilter(input, filter_sizes, out_backprop): the output is
 * the filter's shape, rf__filter_dims(g). */
rf_status *rf__conv2d_backprop_filter_prepare(rf__kernel_ctx *ctx,
                                              rf__conv_geom *g);
/* MaxPool / AvgPool(input): output (n, oh, ow, c). */
rf_status *rf__pool_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g);
/* MaxPoolGrad(orig_input, orig_output, grad): both of the pool's output
 * shape; the output is orig_input's. */
rf_status *rf__max_pool_grad_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g);
/* AvgPoolGrad(orig_input_shape, grad): the output is (n, h, w, c). */
rf_status *rf__avg_pool_grad_prepare(rf__kernel_ctx *ctx, rf__conv_geom *g);

#ifdef __cplusplus
}
#endif

#endif
