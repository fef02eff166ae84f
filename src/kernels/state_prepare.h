/* kernels/state_prepare.h - the device-independent half of the variable
 * kernels (kernels/cpu/state_kernels.c, kernels/cuda/state_kernels.cu):
 * reading handles, the argument checks with their messages, the lock order
 * of updates with several variables (ApplyAdam, ApplyAdamW, ApplyMomentum), and
 * Variable / ReadVariable / Assign, which touch no element. `on_gpu`: the
 * kernel's device keeps variable values in device memory (handles are host
 * memory everywhere). Usable from C and CUDA C++. */
#ifndef RF_KERNELS_STATE_PREPARE_H
#define RF_KERNELS_STATE_PREPARE_H

#include <stdbool.h>

#include "kernels/kernel.h"
#include "device/device.h"

/* The family's kernels (RF__KERNEL_ROW); the handles are host memory. */
#define RF_STATE_KERNELS(X)                                                  \
  X("Variable", variable_compute, 0, 1u << 0, RF_COST_CHEAP)                 \
  X("ReadVariable", read_variable_compute, 1u << 0, 0, RF_COST_CHEAP)        \
  X("Assign", assign_compute, 1u << 0, 0, RF_COST_CHEAP)                     \
  X("ApplyGradientDescent", apply_gd_compute, 1u << 0, 0, RF_COST_EXPENSIVE) \
  X("ApplyAdam", apply_adam_compute, 0x7u, 0, RF_COST_EXPENSIVE)             \
  X("ApplyMomentum", apply_momentum_compute, 0x3u, 0, RF_COST_EXPENSIVE)     \
  X("ApplyAdamW", apply_adamw_compute, 0x7u, 0, RF_COST_EXPENSIVE)

#ifdef __cplusplus
extern "C" {
#endif

/* The variable whose handle is input k (a host resource scalar), or
 * INVALID_ARGUMENT. */
rf_status *rf__state_get_variable(rf__kernel_ctx *ctx, int k,
                                  rf__variable **out);
/* INVALID_ARGUMENT "<what> must be a scalar, got shape ..." unless input k is
 * a scalar. */
rf_status *rf__state_check_scalar(rf__kernel_ctx *ctx, int k, const char *what);
/* Checks that v (v->mu held) is of `dtype`, initialized (on_gpu: in device
 * memory) and of `shape`; `what` names the update's operand in messages. */
rf_status *rf__state_check_update(rf__kernel_ctx *ctx, const rf__variable *v,
                                  rf_dtype dtype, const rf_shape *shape,
                                  const char *what, bool on_gpu);
/* Makes t (from the kernel's writable copy of v's value, or the value
 * itself) v's value; v->mu held. */
void rf__state_install_value(rf__variable *v, rf_tensor *t);
/* Undoes the writable copy t on a failure path (NULL: nothing); v->mu held. */
void rf__state_drop_value(rf__variable *v, rf_tensor *t);
/* Locks (lock) or unlocks vs[0, n) in order (unlocking in reverse). */
void rf__state_lock_distinct(rf__variable **vs, int n, bool lock);

/* ApplyGradientDescent's checks before its lock: the handle, a scalar alpha
 * and, on_gpu, alpha and delta of one float dtype (the GPU reads alpha in
 * delta's type). */
rf_status *rf__state_gd_prepare(rf__kernel_ctx *ctx, bool on_gpu,
                                rf__variable **v);
/* The operands of an update with several variables: handles at inputs
 * [0, nvars), scalars at inputs scalar_inputs[k] named scalar_names[k], the
 * gradient at input `grad`; `distinct` is the message when two handles are
 * one variable. */
typedef struct rf__state_update_spec {
  int nvars; /* at most 3 */
  int nscalars;
  const int *scalar_inputs;
  const char *const *scalar_names;
  int grad;
  const char *distinct;
} rf__state_update_spec;

/* An update's checks before its lock: nvars distinct handles (vars in input
 * order, sorted by address: every kernel, CPU or GPU, locks them in that one
 * global order, so updates never deadlock) and scalar inputs, on_gpu each of
 * grad's float dtype. */
rf_status *rf__state_update_prepare(rf__kernel_ctx *ctx, bool on_gpu,
                                    const rf__state_update_spec *spec,
                                    rf__variable **vars, rf__variable **sorted);

/* The specs of ApplyAdam (var, m, v; beta1_power, beta2_power, lr, beta1,
 * beta2, epsilon; grad), ApplyAdamW (ApplyAdam's, then weight_decay before
 * grad) and ApplyMomentum (var, accum; lr, grad, momentum). */
extern const rf__state_update_spec rf__state_adam_spec;
extern const rf__state_update_spec rf__state_adamw_spec;
extern const rf__state_update_spec rf__state_momentum_spec;

/* The kernels that touch no element. Variable outputs its handle in host
 * memory; ReadVariable outputs a snapshot (a new reference to the value);
 * Assign makes the variable hold a reference to its input, no copy. */
rf_status *rf__state_variable_compute(rf__kernel_ctx *ctx, bool on_gpu);
rf_status *rf__state_read_variable_compute(rf__kernel_ctx *ctx, bool on_gpu);
rf_status *rf__state_assign_compute(rf__kernel_ctx *ctx, bool on_gpu);

#ifdef __cplusplus
}
#endif

#endif
