/* kernels/cpu/state_kernels.c - CPU kernels of the variable ops. A resource
 * tensor is a scalar whose 8 bytes hold the rf__variable* of the device.
 * Invariant: a tensor some reader may hold is never written. Updates run under
 * the variable's mutex and write in place only when the variable holds the
 * only reference to its value; otherwise they write a copy and swap it in, so
 * a snapshot taken by ReadVariable keeps its value. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/status.h"
#include "kernels/kernel.h"
#include "ops/families.h"
#include "runtime/device.h"

/* ---- helpers ---- */

static rf_status *get_variable(rf__kernel_ctx *ctx, int k, rf__variable **out) {
  const rf_tensor *t = ctx->inputs[k];
  rf__variable *var = NULL;
  if (t->dtype == RF_RESOURCE && t->num_elements == 1)
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

static bool shapes_compatible(const rf_shape *decl, const rf_shape *s) {
  if (decl->rank < 0) return true;
  if (decl->rank != s->rank) return false;
  for (int i = 0; i < s->rank; i++)
    if (decl->dims[i] >= 0 && decl->dims[i] != s->dims[i]) return false;
  return true;
}

/* Checks v's dtype is T and its value is initialized with `shape`; v->mu
 * held. `what` names the update's operand in messages. */
static rf_status *check_update(rf__kernel_ctx *ctx, const rf__variable *v,
                               rf_dtype dtype, const rf_shape *shape,
                               const char *what) {
  if (v->dtype != dtype)
    return rf__kernel_error(
        ctx, RF_INVALID_ARGUMENT, "variable '%s' is %s but %s is %s", v->name,
        rf_dtype_name(v->dtype), what, rf_dtype_name(dtype));
  if (!v->value) return not_initialized(ctx, v);
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

/* A tensor holding v's value that may be written: the value itself when the
 * variable is its sole owner, else a fresh copy. v->mu held. */
static rf_status *writable_value(rf__kernel_ctx *ctx, rf__variable *v,
                                 rf_tensor **out) {
  rf_tensor *cur = v->value;
  if (rf__tensor_is_sole_owner(cur)) {
    *out = cur;
    return NULL;
  }
  rf_tensor *t;
  RF_CHECK(rf_tensor_new(cur->dtype, &cur->shape,
                         ctx->device ? ctx->device->allocator : NULL, &t));
  memcpy(t->data, cur->data, cur->nbytes);
  *out = t;
  return NULL;
}

/* Installs the written tensor from writable_value. v->mu held. */
static void install_value(rf__variable *v, rf_tensor *t) {
  if (t == v->value) return;
  rf_tensor_release(v->value);
  v->value = t;
}

/* Undoes writable_value on a failure path. */
static void drop_value(rf__variable *v, rf_tensor *t) {
  if (t && t != v->value) rf_tensor_release(t);
}

static rf_status *check_scalar(rf__kernel_ctx *ctx, int k, const char *what) {
  if (ctx->inputs[k]->shape.rank == 0) return NULL;
  char buf[128];
  rf_shape_format(&ctx->inputs[k]->shape, buf, sizeof buf);
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "%s must be a scalar, got shape %s", what, buf);
}

/* ---- Variable, ReadVariable, Assign ---- */

static rf_status *variable_compute(rf__kernel_ctx *ctx) {
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
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_RESOURCE, &scalar, &out));
  memcpy(out->data, &var, sizeof var);
  return NULL;
}

static rf_status *read_variable_compute(rf__kernel_ctx *ctx) {
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
  ctx->outputs[0] = value;
  return NULL;
}

/* The variable keeps a reference to the value (no copy); updates copy it
 * first while anyone else still holds it. */
static rf_status *assign_compute(rf__kernel_ctx *ctx) {
  rf__variable *v = NULL;
  rf_tensor *value = ctx->inputs[1];
  RF_CHECK(get_variable(ctx, 0, &v));
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

/* ---- update loops: simple loops over contiguous arrays (vectorisable);
 * 16-bit floats go through float. ---- */

typedef struct update_args {
  rf_dtype dtype;
  void *var, *m, *v;
  const void *delta;
  double alpha; /* GD: alpha; Adam: lr_t */
  double beta1, beta2, epsilon;
} update_args;

#define RF_UPDATE_LOOPS(T, SQRT)                                             \
  static void gd_##T(T *restrict x, const T *restrict d, T alpha, int64_t b, \
                     int64_t e) {                                            \
    for (int64_t i = b; i < e; i++) x[i] -= alpha * d[i];                    \
  }                                                                          \
  static void adam_##T(T *restrict x, T *restrict m, T *restrict v,          \
                       const T *restrict g, const update_args *a, int64_t b, \
                       int64_t e) {                                          \
    T lr = (T)a->alpha, b1 = (T)a->beta1, b2 = (T)a->beta2;                  \
    T eps = (T)a->epsilon, c1 = 1 - b1, c2 = 1 - b2;                         \
    for (int64_t i = b; i < e; i++) {                                        \
      T gi = g[i];                                                           \
      T mi = b1 * m[i] + c1 * gi;                                            \
      T vi = b2 * v[i] + c2 * gi * gi;                                       \
      m[i] = mi;                                                             \
      v[i] = vi;                                                             \
      x[i] -= lr * mi / (SQRT(vi) + eps);                                    \
    }                                                                        \
  }
RF_UPDATE_LOOPS(float, sqrtf)
RF_UPDATE_LOOPS(double, sqrt)
#undef RF_UPDATE_LOOPS

typedef float (*to_float_fn)(uint16_t);
typedef uint16_t (*from_float_fn)(float);

static void half_conv(rf_dtype dt, to_float_fn *to, from_float_fn *from) {
  *to = dt == RF_FLOAT16 ? rf_half_to_float : rf_bfloat16_to_float;
  *from = dt == RF_FLOAT16 ? rf_float_to_half : rf_float_to_bfloat16;
}

static void gd_chunk(void *arg, int64_t b, int64_t e) {
  const update_args *a = arg;
  if (a->dtype == RF_FLOAT32) {
    gd_float(a->var, a->delta, (float)a->alpha, b, e);
  } else if (a->dtype == RF_FLOAT64) {
    gd_double(a->var, a->delta, a->alpha, b, e);
  } else {
    to_float_fn to;
    from_float_fn from;
    half_conv(a->dtype, &to, &from);
    uint16_t *x = a->var;
    const uint16_t *d = a->delta;
    float alpha = (float)a->alpha;
    for (int64_t i = b; i < e; i++) x[i] = from(to(x[i]) - alpha * to(d[i]));
  }
}

static void adam_chunk(void *arg, int64_t b, int64_t e) {
  const update_args *a = arg;
  if (a->dtype == RF_FLOAT32) {
    adam_float(a->var, a->m, a->v, a->delta, a, b, e);
  } else if (a->dtype == RF_FLOAT64) {
    adam_double(a->var, a->m, a->v, a->delta, a, b, e);
  } else {
    to_float_fn to;
    from_float_fn from;
    half_conv(a->dtype, &to, &from);
    uint16_t *x = a->var, *m = a->m, *v = a->v;
    const uint16_t *g = a->delta;
    float lr = (float)a->alpha, b1 = (float)a->beta1, b2 = (float)a->beta2;
    float eps = (float)a->epsilon;
    for (int64_t i = b; i < e; i++) {
      float gi = to(g[i]);
      float mi = b1 * to(m[i]) + (1 - b1) * gi;
      float vi = b2 * to(v[i]) + (1 - b2) * gi * gi;
      m[i] = from(mi);
      v[i] = from(vi);
      x[i] = from(to(x[i]) - lr * mi / (sqrtf(vi) + eps));
    }
  }
}

/* ---- ApplyGradientDescent, ApplyAdam ---- */

static rf_status *apply_gd_compute(rf__kernel_ctx *ctx) {
  rf__variable *v = NULL;
  const rf_tensor *delta = ctx->inputs[2];
  rf_tensor *dst = NULL;
  RF_CHECK(get_variable(ctx, 0, &v));
  RF_CHECK(check_scalar(ctx, 1, "alpha"));
  pthread_mutex_lock(&v->mu);
  rf_status *st = check_update(ctx, v, delta->dtype, &delta->shape, "delta");
  if (!st) st = writable_value(ctx, v, &dst);
  if (!st) {
    update_args a = {.dtype = delta->dtype,
                     .var = dst->data,
                     .delta = delta->data,
                     .alpha = rf_tensor_get(ctx->inputs[1], 0)};
    rf__kernel_parallel_for(ctx, dst->num_elements, 4, gd_chunk, &a);
    install_value(v, dst);
  }
  pthread_mutex_unlock(&v->mu);
  return st;
}

static void lock_distinct(rf__variable **vs, int n, bool lock) {
  for (int i = 0; i < n; i++) {
    if (lock)
      pthread_mutex_lock(&vs[i]->mu);
    else
      pthread_mutex_unlock(&vs[n - 1 - i]->mu);
  }
}

/* Adam's three variables, distinct and sorted by address: every kernel locks
 * them in one global order, so two updates can never deadlock. */
static rf_status *adam_variables(rf__kernel_ctx *ctx, rf__variable **vars,
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

static void adam_scalars(rf__kernel_ctx *ctx, update_args *a) {
  double b1p = rf_tensor_get(ctx->inputs[3], 0);
  double b2p = rf_tensor_get(ctx->inputs[4], 0);
  double lr = rf_tensor_get(ctx->inputs[5], 0);
  a->alpha = lr * sqrt(1 - b2p) / (1 - b1p);
  a->beta1 = rf_tensor_get(ctx->inputs[6], 0);
  a->beta2 = rf_tensor_get(ctx->inputs[7], 0);
  a->epsilon = rf_tensor_get(ctx->inputs[8], 0);
}

static rf_status *apply_adam_compute(rf__kernel_ctx *ctx) {
  static const char *const scalar_names[6] = {
      "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"};
  rf__variable *vars[3], *sorted[3];
  rf_tensor *dst[3] = {NULL, NULL, NULL};
  const rf_tensor *grad = ctx->inputs[9];
  rf_status *st = NULL;
  RF_CHECK(adam_variables(ctx, vars, sorted));
  for (int k = 0; k < 6; k++)
    RF_CHECK(check_scalar(ctx, 3 + k, scalar_names[k]));
  lock_distinct(sorted, 3, true);
  for (int k = 0; k < 3 && !st; k++)
    st = check_update(ctx, vars[k], grad->dtype, &grad->shape, "grad");
  for (int k = 0; k < 3 && !st; k++) st = writable_value(ctx, vars[k], &dst[k]);
  if (!st) {
    update_args a = {.dtype = grad->dtype,
                     .var = dst[0]->data,
                     .m = dst[1]->data,
                     .v = dst[2]->data,
                     .delta = grad->data};
    adam_scalars(ctx, &a);
    rf__kernel_parallel_for(ctx, grad->num_elements, 30, adam_chunk, &a);
    for (int k = 0; k < 3; k++) install_value(vars[k], dst[k]);
  } else {
    for (int k = 0; k < 3; k++) drop_value(vars[k], dst[k]);
  }
  lock_distinct(sorted, 3, false);
  return st;
}

static const rf__kernel_def state_kernels[] = {
    {.op = "Variable",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = variable_compute,
     .host_memory_outputs = 1u << 0},
    {.op = "ReadVariable",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = read_variable_compute,
     .host_memory_inputs = 1u << 0},
    {.op = "Assign",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .compute = assign_compute,
     .host_memory_inputs = 1u << 0},
    {.op = "ApplyGradientDescent",
     .device_type = RF_DEVICE_CPU,
     .compute = apply_gd_compute,
     .host_memory_inputs = 1u << 0},
    {.op = "ApplyAdam",
     .device_type = RF_DEVICE_CPU,
     .compute = apply_adam_compute,
     .host_memory_inputs = 0x7u}, /* the three handles */
};

rf_status *rf__register_cpu_state_kernels(void) {
  for (size_t i = 0; i < sizeof state_kernels / sizeof state_kernels[0]; i++)
    RF_CHECK(rf__kernel_register(&state_kernels[i]));
  return NULL;
}
