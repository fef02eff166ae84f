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

/* The family's kernels (RF__KERNEL_ROW); the handles are host memory. The
 * _MultiApply* ops (passes/group_updates.c) run the same kernels over N
 * tensors; their handles come straight from Variable nodes of their own
 * device (host memory there), so they need no host-memory bits, which
 * cover only inputs 0-31. */
#define RF_STATE_KERNELS(X)                                                  \
  X("Variable", variable_compute, 0, 1u << 0, RF_COST_CHEAP)                 \
  X("ReadVariable", read_variable_compute, 1u << 0, 0, RF_COST_CHEAP)        \
  X("Assign", assign_compute, 1u << 0, 0, RF_COST_CHEAP)                     \
  X("AssignMul", assign_mul_compute, 1u << 0, 0, RF_COST_CHEAP)              \
  X("ApplyGradientDescent", apply_gd_compute, 1u << 0, 0, RF_COST_EXPENSIVE) \
  X("ApplyAdam", apply_adam_compute, 0x7u, 0, RF_COST_EXPENSIVE)             \
  X("ApplyMomentum", apply_momentum_compute, 0x3u, 0, RF_COST_EXPENSIVE)     \
  X("ApplyAdamW", apply_adamw_compute, 0x7u, 0, RF_COST_EXPENSIVE)           \
  X("_MultiApplyAdam", apply_adam_compute, 0, 0, RF_COST_EXPENSIVE)          \
  X("_MultiApplyAdamW", apply_adamw_compute, 0, 0, RF_COST_EXPENSIVE)        \
  X("_MultiApplyMomentum", apply_momentum_compute, 0, 0, RF_COST_EXPENSIVE)  \
  X("_MultiAssignMul", multi_assign_mul_compute, 0, 0, RF_COST_CHEAP)

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
  const char *grad_name; /* in messages: "grad", or AssignMul's "value" */
  const char *distinct;
} rf__state_update_spec;

/* The specs of ApplyAdam (var, m, v; beta1_power, beta2_power, lr, beta1,
 * beta2, epsilon; grad), ApplyAdamW (ApplyAdam's, then weight_decay before
 * grad), ApplyMomentum (var, accum; lr, grad, momentum) and AssignMul
 * (resource; value in the gradient's place: _MultiAssignMul runs as an
 * update whose compute multiplies and outputs the new values). */
extern const rf__state_update_spec rf__state_adam_spec;
extern const rf__state_update_spec rf__state_adamw_spec;
extern const rf__state_update_spec rf__state_momentum_spec;
extern const rf__state_update_spec rf__state_assign_mul_spec;

/* The most tensors one update node takes: the grouping pass puts at most
 * this many into a _MultiApply* node, the kernels keep their operands on
 * the stack, and one GPU launch takes them all. */
#define RF_STATE_MAX_TENSORS 64

/* Input j of spec's op for tensor i of n: the _MultiApply* ops take each
 * handle and the gradient as lists of n ("var: N * resource, ..., grad:
 * N * T"), the scalars once, in the single op's order (n = 1: j). */
int rf__state_input(const rf__state_update_spec *spec, int n, int j, int i);

/* An update of n tensors (1 for ApplyAdam, ApplyAdamW, ApplyMomentum; N for
 * their _MultiApply* forms), as rf__state_update_run hands it to `compute`:
 * variable k of tensor i and its writable value at [k * n + i]. */
typedef struct rf__state_update {
  const rf__state_update_spec *spec;
  int n;
  rf__variable *vars[3 * RF_STATE_MAX_TENSORS];
  rf__variable *sorted[3 * RF_STATE_MAX_TENSORS]; /* by address */
  rf_tensor *dst[3 * RF_STATE_MAX_TENSORS];
} rf__state_update;

/* Gradient and scalar j (a spec input index) of an update. */
const rf_tensor *rf__state_grad(const rf__kernel_ctx *ctx,
                                const rf__state_update *u, int i);
const rf_tensor *rf__state_scalar(const rf__kernel_ctx *ctx,
                                  const rf__state_update *u, int j);

/* Whether input j of spec's op is a beta power (Adam's and AdamW's inputs
 * 3 and 4). */
bool rf__state_is_power(const rf__state_update_spec *spec, int j);
/* Whether scalar j of u is a float64 beta power of a float32 update (the
 * _MultiApplyAdam* forms with Tpower float64): the kernels round it to
 * float32 before using it, as a Cast to float32 would. Otherwise a power
 * has the gradient's dtype (INVALID_ARGUMENT from the update's checks). */
bool rf__state_power_f64(const rf__kernel_ctx *ctx, const rf__state_update *u,
                         int j);

/* A writable copy of v's value (or the value, when v holds the only
 * reference); v->mu held. */
typedef rf_status *(*rf__state_writable_fn)(rf__kernel_ctx *ctx,
                                            rf__variable *v, rf_tensor **out);
/* Writes the update into u->dst; may fail only before writing anything. */
typedef rf_status *(*rf__state_compute_fn)(rf__kernel_ctx *ctx,
                                           const rf__state_update *u,
                                           const void *arg);

/* Runs the update of every tensor of ctx's node, all or nothing: checks
 * the handles (distinct: every variable of every tensor), the scalars (on
 * the GPU of grad's float dtype), locks every variable in the one global
 * order (by address, so updates never deadlock), checks each variable
 * against its gradient, takes every writable value, then computes and
 * installs them all. Any failure before `compute` returns writes nothing
 * and leaves every variable as it was. */
rf_status *rf__state_update_run(rf__kernel_ctx *ctx, bool on_gpu,
                                const rf__state_update_spec *spec,
                                rf__state_writable_fn writable,
                                rf__state_compute_fn compute, const void *arg);

/* dst *= value elementwise (dst: the variable's writable value, of value's
 * dtype and shape); may fail only before writing anything. */
typedef rf_status *(*rf__state_mul_fn)(rf__kernel_ctx *ctx, rf_tensor *dst,
                                       const rf_tensor *value);
/* AssignMul: checks the variable against input 1 (dtype, initialized,
 * shape), multiplies its writable value by `mul` under its mutex - in
 * place when it holds the only reference, so its buffer stays - installs
 * it and outputs a new reference to it. */
rf_status *rf__state_assign_mul_run(rf__kernel_ctx *ctx, bool on_gpu,
                                    rf__state_writable_fn writable,
                                    rf__state_mul_fn mul);

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
