/* kernels/fused_conv.h - _FusedConv2DBiasRelu and _MaxPoolGradRelu
 * (passes/fuse_epilogues.c) as the unfused kernels they replace (Conv2D,
 * BiasAdd and Relu; MaxPoolGrad and _ReluGrad) run one after the other
 * through rf__kernel_run_nested: the CPU kernels, and the GPU kernel where
 * cuDNN does not take the convolution. Results are those of
 * the unfused graph, bit for bit. Usable from C and CUDA C++. */
#ifndef RF_KERNELS_FUSED_CONV_H
#define RF_KERNELS_FUSED_CONV_H

#include "kernels/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Relu(BiasAdd(Conv2D(input, filter), bias)) into output 0. */
rf_status *rf__fused_conv_bias_relu_unfused(rf__kernel_ctx *ctx);

/* _MaxPoolGradRelu: _ReluGrad(MaxPoolGrad(orig_input, orig_output, grad),
 * orig_input) into output 0. */
rf_status *rf__max_pool_grad_relu_unfused(rf__kernel_ctx *ctx);

/* The CPU kernels (kernels/fused_conv.c); the GPU ones are
 * kernels/cuda/conv.cu's and pool.cu's, registered with the conv family. */
rf_status *rf__register_cpu_fused_conv_kernels(void);

#ifdef __cplusplus
}
#endif

#endif
