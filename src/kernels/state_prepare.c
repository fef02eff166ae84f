/* kernels/state_prepare.c - see state_prepare.h: what the CPU and GPU
 * variable kernels share. Invariant kept by every update: a tensor some
 * reader may hold is never written (the kernels write in place only when the
 * variable holds the only reference, else a copy that is swapped in). */
#include "kernels/state_prepare.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

rf_status *rf__state_get_variable(rf__kernel_ctx *ctx, int k,
                                  rf__variable **out) {
  const rf_tensor *t = ctx->inputs[k];
  rf__variable *var = NULL;
  /* A handle is host memory on every device (the kernels' host-memory
   * bits); a device tensor here is no handle. */
  if (t->dtype == RF_RESOURCE && t->num_elements == 1 && !t->on_gpu)
    memcpy(&var, t->data, sizeof var);
  if (!var)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "input %d is not a variable handle", k);
  *out = var;
  return NULL;
}

static rf_status *not_initialized(rf__kernel_ctx *ctx, const rf__variable *v) {
  return rf__kernel_error(ctx, RF_FAILED_PRECONDITION,
                          "variable '%s' on %s is not initialized", v->name,
                          ctx->device ? ctx->device->canonical : "?");
}

/* On a GPU device a variable holds device memory. A handle may cross devices
 * (ops placed by hand away from their variable): a host value there means a
 * CPU kernel assigned it, and reading it on the device would fault. */
static rf_status *device_value(rf__kernel_ctx *ctx, const rf__variable *v,
                               const rf_tensor *t, bool on_gpu) {
  if (!on_gpu || !t || t->on_gpu) return NULL;
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "variable '%s' holds host memory here; place the "
                          "ops of a variable on its device",
                          v->name);
}

static bool shapes_compatible(const rf_shape *decl, const rf_shape *s) {
  if (decl->rank < 0) return true;
  if (decl->rank != s->rank) return false;
  for (int i = 0; i < s->rank; i++)
    if (decl->dims[i] >= 0 && decl->dims[i] != s->dims[i]) return false;
  return true;
}

rf_status *rf__state_check_scalar(rf__kernel_ctx *ctx, int k,
                                  const char *what) {
  if (ctx->inputs[k]->shape.rank == 0) return NULL;
  char buf[128];
  rf_shape_format(&ctx->inputs[k]->shape, buf, sizeof buf);
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "%s must be a scalar, got shape %s", what, buf);
}

rf_status *rf__state_check_update(rf__kernel_ctx *ctx, const rf__variable *v,
                                  rf_dtype dtype, const rf_shape *shape,
                                  const char *what, bool on_gpu) {
  if (v->dtype != dtype)
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT, "variable '%s' is %s but %s is %s", v->name,
        rf_dtype_name(v->dtype), what, rf_dtype_name(dtype));
  if (!v->value) return not_initialized(ctx, v);
  RF_CHECK(device_value(ctx, v, v->value, on_gpu));
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

void rf__state_install_value(rf__variable *v, rf_tensor *t) {
  if (t == v->value) return;
  rf_tensor_release(v->value);
  v->value = t;
}

void rf__state_drop_value(rf__variable *v, rf_tensor *t) {
  if (t && t != v->value) rf_tensor_release(t);
}

/* On the GPU the update kernels read the scalar at input k in the type of
 * the updated tensor (input `like`, named like_name). */
static rf_status *same_float_dtype(rf__kernel_ctx *ctx, int k, const char *what,
                                   int like, const char *like_name) {
  rf_dtype d = ctx->inputs[k]->dtype, want = ctx->inputs[like]->dtype;
  if (rf_dtype_is_float(want) && d == want) return NULL;
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "%s (%s) and %s (%s) must share a float dtype", what,
                          rf_dtype_name(d), like_name, rf_dtype_name(want));
}

rf_status *rf__state_gd_prepare(rf__kernel_ctx *ctx, bool on_gpu,
                                rf__variable **v) {
  RF_CHECK(rf__state_get_variable(ctx, 0, v));
  RF_CHECK(rf__state_check_scalar(ctx, 1, "alpha"));
  if (on_gpu) RF_CHECK(same_float_dtype(ctx, 1, "alpha", 2, "delta"));
  return NULL;
}

static const int adam_scalars[7] = {3, 4, 5, 6, 7, 8, 9};
static const char *const adam_names[7] = {
    "beta1_power", "beta2_power", "lr",          "beta1",
    "beta2",       "epsilon",     "weight_decay"};
static const int momentum_scalars[2] = {2, 4};
static const char *const momentum_names[2] = {"lr", "momentum"};

const rf__state_update_spec rf__state_adam_spec = {
    3,
    6,
    adam_scalars,
    adam_names,
    9,
    "grad",
    "var, m and v must be three different variables"};
const rf__state_update_spec rf__state_adamw_spec = {
    3,
    7,
    adam_scalars,
    adam_names,
    10,
    "grad",
    "var, m and v must be three different variables"};
const rf__state_update_spec rf__state_momentum_spec = {
    2,
    2,
    momentum_scalars,
    momentum_names,
    3,
    "grad",
    "var and accum must be two different variables"};
const rf__state_update_spec rf__state_assign_mul_spec = {
    1, 0, NULL, NULL, 1, "value", "one variable per tensor"};

bool rf__state_is_power(const rf__state_update_spec *spec, int j) {
  return (spec == &rf__state_adam_spec || spec == &rf__state_adamw_spec) &&
         (j == 3 || j == 4);
}

bool rf__state_power_f64(const rf__kernel_ctx *ctx, const rf__state_update *u,
                         int j) {
  if (!rf__state_is_power(u->spec, j)) return false;
  return rf__state_scalar(ctx, u, j)->dtype == RF_FLOAT64 &&
         rf__state_grad(ctx, u, 0)->dtype == RF_FLOAT32;
}

int rf__state_input(const rf__state_update_spec *spec, int n, int j, int i) {
  if (j < spec->nvars) return j * n + i;
  int k = spec->nvars * n + (j - spec->nvars); /* lists before j count once */
  if (j < spec->grad) return k;
  return j == spec->grad ? k + i : k + n - 1;
}

const rf_tensor *rf__state_grad(const rf__kernel_ctx *ctx,
                                const rf__state_update *u, int i) {
  return ctx->inputs[rf__state_input(u->spec, u->n, u->spec->grad, i)];
}

const rf_tensor *rf__state_scalar(const rf__kernel_ctx *ctx,
                                  const rf__state_update *u, int j) {
  return ctx->inputs[rf__state_input(u->spec, u->n, j, 0)];
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (rf__variable *const *)a;
  uintptr_t y = (uintptr_t) * (rf__variable *const *)b;
  return (x > y) - (x < y);
}

/* The checks before the lock: distinct handles (within one tensor's update
 * spec->distinct says so; across tensors the pass never groups one
 * variable twice), scalar inputs, on_gpu each of grad's float dtype. */
static rf_status *update_prepare(rf__kernel_ctx *ctx, bool on_gpu,
                                 rf__state_update *u) {
  const rf__state_update_spec *spec = u->spec;
  int n = u->n, nv = spec->nvars * n;
  for (int k = 0; k < nv; k++)
    RF_CHECK(rf__state_get_variable(ctx, k, &u->vars[k]));
  for (int i = 0; i < n; i++)
    for (int a = 0; a < spec->nvars; a++)
      for (int b = a + 1; b < spec->nvars; b++)
        if (u->vars[a * n + i] == u->vars[b * n + i])
          return rf__kernel_error(ctx, RF_INVALID_ARGUMENT, "%s",
                                  spec->distinct);
  memcpy(u->sorted, u->vars, (size_t)nv * sizeof *u->vars);
  qsort(u->sorted, (size_t)nv, sizeof *u->sorted, by_address);
  for (int k = 1; k < nv; k++)
    if (u->sorted[k] == u->sorted[k - 1])
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "variable '%s' is updated twice by one node",
                              u->sorted[k]->name);
  int grad0 = rf__state_input(spec, n, spec->grad, 0);
  for (int k = 0; k < spec->nscalars; k++) {
    int in = rf__state_input(spec, n, spec->scalar_inputs[k], 0);
    RF_CHECK(rf__state_check_scalar(ctx, in, spec->scalar_names[k]));
    if (rf__state_power_f64(ctx, u, spec->scalar_inputs[k])) continue;
    if (on_gpu || rf__state_is_power(spec, spec->scalar_inputs[k]))
      RF_CHECK(same_float_dtype(ctx, in, spec->scalar_names[k], grad0, "grad"));
  }
  return NULL;
}

static void lock_all(rf__variable **vs, int n, bool lock) {
  for (int i = 0; i < n; i++) {
    if (lock)
      pthread_mutex_lock(&vs[i]->mu);
    else
      pthread_mutex_unlock(&vs[n - 1 - i]->mu);
  }
}

rf_status *rf__state_update_run(rf__kernel_ctx *ctx, bool on_gpu,
                                const rf__state_update_spec *spec,
                                rf__state_writable_fn writable,
                                rf__state_compute_fn compute, const void *arg) {
  rf__state_update u;
  u.spec = spec;
  /* N lists of nvars handles and a gradient, and the scalars once. */
  u.n = (ctx->num_inputs - spec->nscalars) / (spec->nvars + 1);
  if (u.n < 1 || u.n > RF_STATE_MAX_TENSORS ||
      u.n * (spec->nvars + 1) + spec->nscalars != ctx->num_inputs)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "an update of %d inputs is not 1 to %d tensors",
                            ctx->num_inputs, RF_STATE_MAX_TENSORS);
  int nv = spec->nvars * u.n;
  RF_CHECK(update_prepare(ctx, on_gpu, &u));
  for (int k = 0; k < nv; k++) u.dst[k] = NULL;
  rf_status *st = NULL;
  lock_all(u.sorted, nv, true);
  for (int k = 0; k < nv && !st; k++) {
    const rf_tensor *g = rf__state_grad(ctx, &u, k % u.n);
    st = rf__state_check_update(ctx, u.vars[k], g->dtype, &g->shape,
                                spec->grad_name, on_gpu);
  }
  for (int k = 0; k < nv && !st; k++) st = writable(ctx, u.vars[k], &u.dst[k]);
  if (!st) st = compute(ctx, &u, arg);
  for (int k = 0; k < nv; k++) {
    if (!st)
      rf__state_install_value(u.vars[k], u.dst[k]);
    else
      rf__state_drop_value(u.vars[k], u.dst[k]);
  }
  lock_all(u.sorted, nv, false);
  /* cppcheck-suppress returnDanglingLifetime ; st never points into u */
  return st;
}

rf_status *rf__state_assign_mul_run(rf__kernel_ctx *ctx, bool on_gpu,
                                    rf__state_writable_fn writable,
                                    rf__state_mul_fn mul) {
  rf__variable *v = NULL;
  const rf_tensor *value = ctx->inputs[1];
  RF_CHECK(rf__state_get_variable(ctx, 0, &v));
  rf_tensor *dst = NULL;
  pthread_mutex_lock(&v->mu);
  rf_status *st = rf__state_check_update(ctx, v, value->dtype, &value->shape,
                                         "value", on_gpu);
  if (!st) st = writable(ctx, v, &dst);
  if (!st) st = mul(ctx, dst, value);
  if (!st) {
    rf__state_install_value(v, dst);
    ctx->outputs[0] = rf_tensor_retain(dst);
  } else {
    rf__state_drop_value(v, dst);
  }
  pthread_mutex_unlock(&v->mu);
  return st;
}

/* ---- Variable, ReadVariable, Assign ---- */

rf_status *rf__state_variable_compute(rf__kernel_ctx *ctx, bool on_gpu) {
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
  RF_CHECK(rf__kernel_error_at(ctx, st));
  rf_shape scalar = rf_shape_scalar();
  rf_tensor *out;
  if (on_gpu)
    RF_CHECK(rf__kernel_alloc_host_output(ctx, 0, RF_RESOURCE, &scalar, &out));
  else
    RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_RESOURCE, &scalar, &out));
  memcpy(out->data, &var, sizeof var);
  return NULL;
}

rf_status *rf__state_read_variable_compute(rf__kernel_ctx *ctx, bool on_gpu) {
  rf__variable *v = NULL;
  rf_dtype dtype;
  RF_CHECK(rf__state_get_variable(ctx, 0, &v));
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "dtype", &dtype));
  if (v->dtype != dtype)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "variable '%s' is %s, not %s", v->name,
                            rf_dtype_name(v->dtype), rf_dtype_name(dtype));
  pthread_mutex_lock(&v->mu);
  rf_tensor *value = rf_tensor_retain(v->value); /* the snapshot */
  pthread_mutex_unlock(&v->mu);
  if (!value) return not_initialized(ctx, v);
  rf_status *st = device_value(ctx, v, value, on_gpu);
  if (st) {
    rf_tensor_release(value);
    return st;
  }
  ctx->outputs[0] = value;
  return NULL;
}

/* Updates copy the value first while anyone else still holds it. */
rf_status *rf__state_assign_compute(rf__kernel_ctx *ctx, bool on_gpu) {
  rf__variable *v = NULL;
  rf_tensor *value = ctx->inputs[1];
  RF_CHECK(rf__state_get_variable(ctx, 0, &v));
  RF_CHECK(device_value(ctx, v, value, on_gpu));
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
