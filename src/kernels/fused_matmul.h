/* kernels/fused_matmul.h - the _FusedMatMul* ops (passes/fuse_epilogues.c)
 * as the unfused kernels they replace, run one after the other through
 * rf__kernel_run_nested: the CPU kernels, and the GPU kernels' fallback
 * where cuBLASLt has no algorithm. Results are those of the unfused graph,
 * bit for bit. Usable from C and CUDA C++. */
#ifndef RF_KERNELS_FUSED_MATMUL_H
#define RF_KERNELS_FUSED_MATMUL_H

#include <stdbool.h>

#include "kernels/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* _FusedMatMulBias (relu false) and _FusedMatMulBiasRelu (relu true):
 * MatMul(a, b), BiasAdd(., bias)[, Relu(.)] into output 0. */
rf_status *rf__fused_matmul_bias_unfused(rf__kernel_ctx *ctx, bool relu);
/* _FusedMatMulBiasGrad: MatMul(a, b) into output 0 and
 * _BiasAddGrad(input bias_input) into output 1. */
rf_status *rf__fused_matmul_bias_grad_unfused(rf__kernel_ctx *ctx);

/* The CPU kernels of the three ops (kernels/fused_matmul.c); the GPU ones
 * are kernels/cuda/fused_matmul.cu's, registered with the math family. */
rf_status *rf__register_cpu_fused_matmul_kernels(void);

#ifdef __cplusplus
}
#endif

#endif
