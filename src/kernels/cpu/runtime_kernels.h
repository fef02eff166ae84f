/* kernels/cpu/runtime_kernels.h - pieces of the runtime kernels (_Arg,
 * _Retval, _Token) that do not depend on the device, shared with the GPU
 * versions in runtime/gpu/runtime_kernels.c. */
#ifndef RF_KERNELS_CPU_RUNTIME_KERNELS_H
#define RF_KERNELS_CPU_RUNTIME_KERNELS_H

#include "kernels/kernel.h"

/* FAILED_PRECONDITION unless the kernel runs inside a session step. */
rf_status *rf__need_step(rf__kernel_ctx *ctx);
/* State = the node's "index" attr (_Arg, _Retval). */
rf_status *rf__index_init(const rf_node *node, void **state);
/* _Arg's fed value, borrowed: the step's feed at the node's index, checked
 * against the node's dtype and to be in host memory (INVALID_ARGUMENT naming
 * both dtypes; INTERNAL when the step has no such feed). */
rf_status *rf__arg_fed(rf__kernel_ctx *ctx, bool device_memory_ok,
                       rf_tensor **value);
/* _Token: one empty host tensor made at init and shared by every step. */
rf_status *rf__token_init(const rf_node *node, void **state);
void rf__token_destroy(void *state);
rf_status *rf__token_compute(rf__kernel_ctx *ctx);

#endif
