/* kernels/cuda/state_kernels.cu - GPU kernels of the variable ops. A
 * variable of a GPU device holds a device tensor; its handle (a resource
 * scalar holding the rf__variable*) lives in host memory.
 *
 * The CPU kernels' rules hold (kernels/cpu/state_kernels.c): a tensor some
 * reader may hold is never written; updates run under the variable's mutex
 * and write in place only when the variable holds the only reference, else
 * into a device copy that is swapped in. Updates are kernels enqueued on the
 * variable device's stream, so they are ordered after every earlier reader
 * on that stream; readers on other devices hold a reference until their
 * copy is done, which keeps the update off their value. The scalar inputs
 * (alpha, the optimizers' betas, lr, epsilon, weight decay, momentum) are
 * device scalars read by the update kernels themselves, in double as the CPU
 * reads them. */
#include <pthread.h>
#include <string.h>

#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */
#include "kernels/state_prepare.h"

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

/* ---- helpers (the checks are kernels/state_prepare.c) ---- */

/* A device tensor holding v's value that may be written: the value itself
 * when the variable is its sole owner, else a copy made on the stream (so
 * it follows every write enqueued before). v->mu held. */
rf_status *writable_value(rf__kernel_ctx *ctx, rf__variable *v,
                          rf_tensor **out) {
  rf_tensor *cur = v->value;
  if (rf__tensor_is_sole_owner(cur)) {
    *out = cur;
    return NULL;
  }
  rf_tensor *t;
  RF_CHECK(new_tensor(ctx, cur->dtype, &cur->shape, &t));
  if (cur->nbytes) {
    cudaError_t err = cudaMemcpyAsync(t->data, cur->data, cur->nbytes,
                                      cudaMemcpyDeviceToDevice, stream(ctx));
    if (err != cudaSuccess) {
      rf_tensor_release(t);
      return error(ctx, err, "cudaMemcpyAsync(variable copy)", __FILE__,
                   __LINE__);
    }
  }
  *out = t;
  return NULL;
}

/* ---- Variable, ReadVariable, Assign: kernels/state_prepare.c ---- */

rf_status *variable_compute(rf__kernel_ctx *ctx) {
  return rf__state_variable_compute(ctx, true);
}
rf_status *read_variable_compute(rf__kernel_ctx *ctx) {
  return rf__state_read_variable_compute(ctx, true);
}
rf_status *assign_compute(rf__kernel_ctx *ctx) {
  return rf__state_assign_compute(ctx, true);
}

/* ---- update kernels ---- */

/* x -= alpha * d, in T's compute type (float for 16-bit floats). */
template <typename T>
__global__ void gd_kernel(T *x, const T *d, const T *alpha, int64_t n) {
  using C = typename Num<T>::C;
  const C a = Num<T>::load(*alpha);
  RF_GPU_LOOP(i, n) {
    x[i] = Num<T>::store(Num<T>::load(x[i]) - a * Num<T>::load(d[i]));
  }
}

/* Adam's six scalars, device pointers in input order. */
template <typename T>
struct AdamScalars {
  const T *beta1_power, *beta2_power, *lr, *beta1, *beta2, *epsilon;
};

/* lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power), in double, then
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   x -= lr_t m / (sqrt(v) + epsilon)  in T's compute type. */
template <typename T>
__global__ void adam_kernel(T *x, T *m, T *v, const T *g, AdamScalars<T> s,
                            int64_t n) {
  using C = typename Num<T>::C;
  auto rd = [](const T *p) { return (double)Num<T>::load(*p); };
  const double b1p = rd(s.beta1_power), b2p = rd(s.beta2_power);
  const C lr = (C)(rd(s.lr) * sqrt(1 - b2p) / (1 - b1p));
  const C b1 = (C)rd(s.beta1), b2 = (C)rd(s.beta2), eps = (C)rd(s.epsilon);
  const C c1 = 1 - b1, c2 = 1 - b2;
  RF_GPU_LOOP(i, n) {
    C gi = Num<T>::load(g[i]);
    C mi = b1 * Num<T>::load(m[i]) + c1 * gi;
    C vi = b2 * Num<T>::load(v[i]) + c2 * gi * gi;
    m[i] = Num<T>::store(mi);
    v[i] = Num<T>::store(vi);
    x[i] = Num<T>::store(Num<T>::load(x[i]) - lr * mi / (sqrt(vi) + eps));
  }
}

/* AdamW's five scalars after Adam's (device pointers) and PyTorch's
 * formula (ops.h: rf_apply_adamw), the factors in double as on the CPU:
 *   x = x (1 - lr wd) - lr / (1 - beta1_power) m /
 *       (sqrt(v) / sqrt(1 - beta2_power) + epsilon). */
template <typename T>
__global__ void adamw_kernel(T *x, T *m, T *v, const T *g, AdamScalars<T> s,
                             const T *weight_decay, int64_t n) {
  using C = typename Num<T>::C;
  auto rd = [](const T *p) { return (double)Num<T>::load(*p); };
  const double b1p = rd(s.beta1_power), b2p = rd(s.beta2_power);
  const double lr = rd(s.lr);
  const C step = (C)(lr / (1 - b1p)), bc2 = (C)sqrt(1 - b2p);
  const C decay = (C)(1 - lr * rd(weight_decay));
  const C b1 = (C)rd(s.beta1), b2 = (C)rd(s.beta2), eps = (C)rd(s.epsilon);
  const C c1 = 1 - b1, c2 = 1 - b2;
  RF_GPU_LOOP(i, n) {
    C gi = Num<T>::load(g[i]);
    C mi = b1 * Num<T>::load(m[i]) + c1 * gi;
    C vi = b2 * Num<T>::load(v[i]) + c2 * gi * gi;
    m[i] = Num<T>::store(mi);
    v[i] = Num<T>::store(vi);
    x[i] = Num<T>::store(Num<T>::load(x[i]) * decay -
                         step * mi / (sqrt(vi) / bc2 + eps));
  }
}

/* TensorFlow's ApplyMomentum: acc = mu acc + g; x -= lr acc, or with
 * Nesterov x -= g lr + acc mu lr. */
template <typename T>
__global__ void momentum_kernel(T *x, T *acc, const T *g, const T *lr_p,
                                const T *mu_p, bool nesterov, int64_t n) {
  using C = typename Num<T>::C;
  const C lr = Num<T>::load(*lr_p), mu = Num<T>::load(*mu_p);
  RF_GPU_LOOP(i, n) {
    C gi = Num<T>::load(g[i]);
    C ai = mu * Num<T>::load(acc[i]) + gi;
    acc[i] = Num<T>::store(ai);
    x[i] = Num<T>::store(Num<T>::load(x[i]) -
                         (nesterov ? gi * lr + ai * mu * lr : lr * ai));
  }
}

/* ---- ApplyGradientDescent, ApplyAdam, ApplyAdamW, ApplyMomentum ---- */

rf_status *gd_launch(rf__kernel_ctx *ctx, rf_tensor *dst,
                     const rf_tensor *delta) {
  int64_t n = dst->num_elements;
  if (n == 0) return NULL;
  return visit_float(delta->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gd_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        (T *)dst->data, (const T *)delta->data, (const T *)ctx->inputs[1]->data,
        n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *apply_gd_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__variable *v = NULL;
  const rf_tensor *delta = ctx->inputs[2];
  rf_tensor *dst = NULL;
  RF_CHECK(rf__state_gd_prepare(ctx, true, &v));
  pthread_mutex_lock(&v->mu);
  rf_status *st = rf__state_check_update(ctx, v, delta->dtype, &delta->shape,
                                         "delta", true);
  if (!st) st = writable_value(ctx, v, &dst);
  if (!st) st = gd_launch(ctx, dst, delta);
  if (!st)
    rf__state_install_value(v, dst);
  else
    rf__state_drop_value(v, dst);
  pthread_mutex_unlock(&v->mu);
  return st;
}

/* Launches the update of spec's variables (dst: their writable values,
 * var first) on grad's elements. */
rf_status *update_launch(rf__kernel_ctx *ctx, const rf__state_update_spec *spec,
                         rf_tensor *const *dst, const rf_tensor *grad) {
  int64_t n = grad->num_elements;
  bool nesterov = false;
  if (spec == &rf__state_momentum_spec)
    RF_CHECK(rf__attrs_get_bool(&ctx->node->attrs, "use_nesterov", &nesterov));
  if (n == 0) return NULL;
  return visit_float(grad->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto in = [&](int k) { return (const T *)ctx->inputs[k]->data; };
    T *x = (T *)dst[0]->data, *m = (T *)dst[1]->data;
    const T *g = (const T *)grad->data;
    if (spec == &rf__state_momentum_spec) {
      momentum_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
          x, m, g, in(2), in(4), nesterov, n);
    } else {
      AdamScalars<T> s = {in(3), in(4), in(5), in(6), in(7), in(8)};
      T *v = (T *)dst[2]->data;
      if (spec == &rf__state_adamw_spec)
        adamw_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
            x, m, v, g, s, in(9), n);
      else
        adam_kernel<T>
            <<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(x, m, v, g, s, n);
    }
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

/* An update of spec's variables, all or nothing (kernels/cpu's rules). */
rf_status *apply_update(rf__kernel_ctx *ctx,
                        const rf__state_update_spec *spec) {
  RF_CHECK(begin(ctx));
  rf__variable *vars[3], *sorted[3];
  rf_tensor *dst[3] = {NULL, NULL, NULL};
  const rf_tensor *grad = ctx->inputs[spec->grad];
  rf_status *st = NULL;
  int nv = spec->nvars;
  RF_CHECK(rf__state_update_prepare(ctx, true, spec, vars, sorted));
  rf__state_lock_distinct(sorted, nv, true);
  for (int k = 0; k < nv && !st; k++)
    st = rf__state_check_update(ctx, vars[k], grad->dtype, &grad->shape, "grad",
                                true);
  for (int k = 0; k < nv && !st; k++)
    st = writable_value(ctx, vars[k], &dst[k]);
  if (!st) st = update_launch(ctx, spec, dst, grad);
  for (int k = 0; k < nv; k++) {
    if (!st)
      rf__state_install_value(vars[k], dst[k]);
    else
      rf__state_drop_value(vars[k], dst[k]);
  }
  rf__state_lock_distinct(sorted, nv, false);
  return st;
}

rf_status *apply_adam_compute(rf__kernel_ctx *ctx) {
  return apply_update(ctx, &rf__state_adam_spec);
}
rf_status *apply_adamw_compute(rf__kernel_ctx *ctx) {
  return apply_update(ctx, &rf__state_adamw_spec);
}
rf_status *apply_momentum_compute(rf__kernel_ctx *ctx) {
  return apply_update(ctx, &rf__state_momentum_spec);
}

const rf__kernel_def defs[] = {RF_STATE_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_state_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
