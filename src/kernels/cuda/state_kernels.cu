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
 * (alpha, Adam's betas, lr, epsilon) are device scalars read by the update
 * kernels themselves, in double as the CPU reads them. */
#include <pthread.h>
#include <string.h>

#include "kernels/cuda/gpu_common.cuh"

extern "C" {
#include "ops/families.h"
}

namespace rf_gpu {
namespace {

/* ---- helpers (the CPU kernels' checks and messages) ---- */

rf_status *get_variable(rf__kernel_ctx *ctx, int k, rf__variable **out) {
  const rf_tensor *t = ctx->inputs[k];
  rf__variable *var = NULL;
  if (t->dtype == RF_RESOURCE && t->num_elements == 1 && !t->on_gpu)
    memcpy(&var, t->data, sizeof var);
  if (!var)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "input %d is not a variable handle", k);
  *out = var;
  return NULL;
}

rf_status *not_initialized(rf__kernel_ctx *ctx, const rf__variable *v) {
  return rf__kernel_error(ctx, RF_FAILED_PRECONDITION,
                          "variable '%s' on %s is not initialized", v->name,
                          ctx->device ? ctx->device->canonical : "?");
}

bool shapes_compatible(const rf_shape *decl, const rf_shape *s) {
  if (decl->rank < 0) return true;
  if (decl->rank != s->rank) return false;
  for (int i = 0; i < s->rank; i++)
    if (decl->dims[i] >= 0 && decl->dims[i] != s->dims[i]) return false;
  return true;
}

/* A variable used by GPU kernels holds device memory. A handle may cross
 * devices (ops placed by hand away from their variable): a host value here
 * means a CPU kernel assigned it, and reading it on the device would fault. */
rf_status *device_value(rf__kernel_ctx *ctx, const rf__variable *v,
                        const rf_tensor *t) {
  if (!t || t->on_gpu) return NULL;
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "variable '%s' holds host memory here; place the "
                          "ops of a variable on its device",
                          v->name);
}

/* v's dtype is T and its value is initialized with `shape`; v->mu held. */
rf_status *check_update(rf__kernel_ctx *ctx, const rf__variable *v,
                        rf_dtype dtype, const rf_shape *shape,
                        const char *what) {
  if (v->dtype != dtype)
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT, "variable '%s' is %s but %s is %s", v->name,
        rf_dtype_name(v->dtype), what, rf_dtype_name(dtype));
  if (!v->value) return not_initialized(ctx, v);
  RF_CHECK(device_value(ctx, v, v->value));
  if (!rf_shape_equal(&v->value->shape, shape)) {
    char a[128], b[128];
    rf_shape_format(&v->value->shape, a, sizeof a);
    rf_shape_format(shape, b, sizeof b);
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "variable '%s' has shape %s but %s has shape %s",
                            v->name, a, what, b);
  }
  return NULL;
}

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

/* Installs the written tensor from writable_value. v->mu held. The old
 * value goes back to the stream's cache: reused only by later work. */
void install_value(rf__variable *v, rf_tensor *t) {
  if (t == v->value) return;
  rf_tensor_release(v->value);
  v->value = t;
}

void drop_value(rf__variable *v, rf_tensor *t) {
  if (t && t != v->value) rf_tensor_release(t);
}

rf_status *check_scalar(rf__kernel_ctx *ctx, int k, const char *what) {
  if (ctx->inputs[k]->shape.rank == 0) return NULL;
  char buf[128];
  rf_shape_format(&ctx->inputs[k]->shape, buf, sizeof buf);
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "%s must be a scalar, got shape %s", what, buf);
}

/* ---- Variable, ReadVariable, Assign ---- */

rf_status *variable_compute(rf__kernel_ctx *ctx) {
  rf_dtype dtype;
  rf_shape shape;
  rf__variable *var;
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "dtype", &dtype));
  RF_CHECK(rf__attrs_get_shape(&ctx->node->attrs, "shape", &shape));
  if (!ctx->device)
    return rf__kernel_error(ctx, RF_FAILED_PRECONDITION,
                            "variables need a session device");
  rf_status *st =
      rf__device_variable(ctx->device, ctx->node->name, dtype, &shape, &var);
  if (st && st != rf__oom()) {
    rf_status *e =
        rf__kernel_error(ctx, rf_status_code(st), "%s", rf_status_message(st));
    rf_status_free(st);
    return e;
  }
  RF_CHECK(st);
  rf_shape scalar = rf_shape_scalar();
  rf_tensor *out;
  RF_CHECK(alloc_host_output(ctx, 0, RF_RESOURCE, &scalar, &out));
  memcpy(out->data, &var, sizeof var);
  return NULL;
}

rf_status *read_variable_compute(rf__kernel_ctx *ctx) {
  rf__variable *v = NULL;
  rf_dtype dtype;
  RF_CHECK(get_variable(ctx, 0, &v));
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "dtype", &dtype));
  if (v->dtype != dtype)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "variable '%s' is %s, not %s", v->name,
                            rf_dtype_name(v->dtype), rf_dtype_name(dtype));
  pthread_mutex_lock(&v->mu);
  rf_tensor *value = rf_tensor_retain(v->value); /* the snapshot */
  pthread_mutex_unlock(&v->mu);
  if (!value) return not_initialized(ctx, v);
  rf_status *st = device_value(ctx, v, value);
  if (st) {
    rf_tensor_release(value);
    return st;
  }
  ctx->outputs[0] = value;
  return NULL;
}

/* The variable keeps a reference to the (device) value, no copy. */
rf_status *assign_compute(rf__kernel_ctx *ctx) {
  rf__variable *v = NULL;
  rf_tensor *value = ctx->inputs[1];
  RF_CHECK(get_variable(ctx, 0, &v));
  RF_CHECK(device_value(ctx, v, value));
  if (value->dtype != v->dtype)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "cannot assign a %s value to variable '%s' of "
                            "dtype %s",
                            rf_dtype_name(value->dtype), v->name,
                            rf_dtype_name(v->dtype));
  if (!shapes_compatible(&v->shape, &value->shape)) {
    char a[128], b[128];
    rf_shape_format(&value->shape, a, sizeof a);
    rf_shape_format(&v->shape, b, sizeof b);
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "cannot assign a value of shape %s to variable "
                            "'%s' of shape %s",
                            a, v->name, b);
  }
  rf_tensor_retain(value);
  pthread_mutex_lock(&v->mu);
  rf_tensor *old = v->value;
  v->value = value;
  pthread_mutex_unlock(&v->mu);
  rf_tensor_release(old);
  return NULL;
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

/* ---- ApplyGradientDescent, ApplyAdam ---- */

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
  RF_CHECK(get_variable(ctx, 0, &v));
  RF_CHECK(check_scalar(ctx, 1, "alpha"));
  if (!rf_dtype_is_float(delta->dtype) || ctx->inputs[1]->dtype != delta->dtype)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "alpha (%s) and delta (%s) must share a float "
                            "dtype",
                            rf_dtype_name(ctx->inputs[1]->dtype),
                            rf_dtype_name(delta->dtype));
  pthread_mutex_lock(&v->mu);
  rf_status *st = check_update(ctx, v, delta->dtype, &delta->shape, "delta");
  if (!st) st = writable_value(ctx, v, &dst);
  if (!st) st = gd_launch(ctx, dst, delta);
  if (!st)
    install_value(v, dst);
  else
    drop_value(v, dst);
  pthread_mutex_unlock(&v->mu);
  return st;
}

void lock_distinct(rf__variable **vs, int n, bool lock) {
  for (int i = 0; i < n; i++) {
    if (lock)
      pthread_mutex_lock(&vs[i]->mu);
    else
      pthread_mutex_unlock(&vs[n - 1 - i]->mu);
  }
}

/* Adam's three variables, distinct and sorted by address: every kernel
 * (CPU or GPU) locks them in one global order, so updates never deadlock. */
rf_status *adam_variables(rf__kernel_ctx *ctx, rf__variable **vars,
                          rf__variable **sorted) {
  for (int k = 0; k < 3; k++) RF_CHECK(get_variable(ctx, k, &vars[k]));
  if (vars[0] == vars[1] || vars[0] == vars[2] || vars[1] == vars[2])
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "var, m and v must be three different variables");
  memcpy(sorted, vars, 3 * sizeof *vars);
  for (int i = 1; i < 3; i++)
    for (int j = i; j > 0 && (uintptr_t)sorted[j] < (uintptr_t)sorted[j - 1];
         j--) {
      rf__variable *t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  return NULL;
}

rf_status *adam_launch(rf__kernel_ctx *ctx, rf_tensor *const *dst,
                       const rf_tensor *grad) {
  int64_t n = grad->num_elements;
  if (n == 0) return NULL;
  return visit_float(grad->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto in = [&](int k) { return (const T *)ctx->inputs[k]->data; };
    AdamScalars<T> s = {in(3), in(4), in(5), in(6), in(7), in(8)};
    adam_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        (T *)dst[0]->data, (T *)dst[1]->data, (T *)dst[2]->data,
        (const T *)grad->data, s, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *apply_adam_compute(rf__kernel_ctx *ctx) {
  static const char *const scalar_names[6] = {
      "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"};
  RF_CHECK(begin(ctx));
  rf__variable *vars[3], *sorted[3];
  rf_tensor *dst[3] = {NULL, NULL, NULL};
  const rf_tensor *grad = ctx->inputs[9];
  rf_status *st = NULL;
  RF_CHECK(adam_variables(ctx, vars, sorted));
  for (int k = 0; k < 6; k++) {
    RF_CHECK(check_scalar(ctx, 3 + k, scalar_names[k]));
    if (ctx->inputs[3 + k]->dtype != grad->dtype ||
        !rf_dtype_is_float(grad->dtype))
      return rf__kernel_error(
          ctx, RF_INVALID_ARGUMENT,
          "%s (%s) and grad (%s) must share a float dtype", scalar_names[k],
          rf_dtype_name(ctx->inputs[3 + k]->dtype), rf_dtype_name(grad->dtype));
  }
  lock_distinct(sorted, 3, true);
  for (int k = 0; k < 3 && !st; k++)
    st = check_update(ctx, vars[k], grad->dtype, &grad->shape, "grad");
  for (int k = 0; k < 3 && !st; k++) st = writable_value(ctx, vars[k], &dst[k]);
  if (!st) st = adam_launch(ctx, dst, grad);
  for (int k = 0; k < 3; k++) {
    if (!st)
      install_value(vars[k], dst[k]);
    else
      drop_value(vars[k], dst[k]);
  }
  lock_distinct(sorted, 3, false);
  return st;
}

const rf__kernel_def defs[] = {
    {.op = "Variable",
     .device_type = RF_DEVICE_GPU,
     .compute = variable_compute,
     .host_memory_outputs = 1u << 0},
    {.op = "ReadVariable",
     .device_type = RF_DEVICE_GPU,
     .compute = read_variable_compute,
     .host_memory_inputs = 1u << 0},
    {.op = "Assign",
     .device_type = RF_DEVICE_GPU,
     .compute = assign_compute,
     .host_memory_inputs = 1u << 0},
    {.op = "ApplyGradientDescent",
     .device_type = RF_DEVICE_GPU,
     .compute = apply_gd_compute,
     .host_memory_inputs = 1u << 0},
    {.op = "ApplyAdam",
     .device_type = RF_DEVICE_GPU,
     .compute = apply_adam_compute,
     .host_memory_inputs = 0x7u}, /* the three handles */
};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_state_kernels(void) {
  return rf_gpu::register_all(rf_gpu::defs,
                              sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
