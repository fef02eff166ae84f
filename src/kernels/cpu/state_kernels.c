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
#include "kernels/cpu/denormal.h"
#include "kernels/kernel.h"
#include "kernels/state_prepare.h"
#include "kernels/kernel_families.h"
#include "device/device.h"

/* ---- helpers (the checks are kernels/state_prepare.c) ---- */

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

/* ---- Variable, ReadVariable, Assign: kernels/state_prepare.c ---- */

static rf_status *variable_compute(rf__kernel_ctx *ctx) {
  return rf__state_variable_compute(ctx, false);
}
static rf_status *read_variable_compute(rf__kernel_ctx *ctx) {
  return rf__state_read_variable_compute(ctx, false);
}
static rf_status *assign_compute(rf__kernel_ctx *ctx) {
  return rf__state_assign_compute(ctx, false);
}

/* ---- update loops: simple loops over contiguous arrays (vectorisable);
 * 16-bit floats go through float. ---- */

typedef struct update_args {
  rf_dtype dtype;
  void *var, *m, *v;
  const void *delta;
  double alpha; /* GD: alpha; Adam: lr_t; AdamW: lr / (1 - beta1_power);
                  Momentum: lr */
  double beta1, beta2, epsilon;
  double momentum;        /* Momentum's */
  bool nesterov;          /* Momentum's */
  double decay, bc2_sqrt; /* AdamW's 1 - lr wd and sqrt(1 - beta2_power) */
} update_args;

/* Adam's loops are built twice, for x86-64-v3 (AVX2: 8 floats per square
 * root and division instead of 4) and for the baseline, and the loader picks
 * one by the CPU (GCC's ifunc; elsewhere the baseline only). ISO C keeps
 * floating-point contraction off, so both give the same bits. Measured
 * (401,408 floats, 4 replicas as in `ringflow train`, best of 20, load 6):
 * 0.88-1.05 ns per element against 0.99-1.13 - the loop is mostly bound by
 * its 28 bytes of memory traffic per element. Sanitizer builds keep the
 * baseline: the ifunc resolver runs before ThreadSanitizer's runtime is up
 * and crashes every program. */
#if defined(__x86_64__) && defined(__has_attribute) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#if __has_attribute(target_clones)
#define RF_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
#endif
#ifndef RF_SIMD_CLONES
#define RF_SIMD_CLONES
#endif

#define RF_UPDATE_LOOPS(T, SQRT)                                             \
  static void gd_##T(T *restrict x, const T *restrict d, T alpha, int64_t b, \
                     int64_t e) {                                            \
    for (int64_t i = b; i < e; i++) x[i] -= alpha * d[i];                    \
  }                                                                          \
  RF_SIMD_CLONES static void adam_##T(                                       \
      T *restrict x, T *restrict m, T *restrict v, const T *restrict g,      \
      const update_args *a, int64_t b, int64_t e) {                          \
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
  }                                                                          \
  RF_SIMD_CLONES static void adamw_##T(                                      \
      T *restrict x, T *restrict m, T *restrict v, const T *restrict g,      \
      const update_args *a, int64_t b, int64_t e) {                          \
    T step = (T)a->alpha, b1 = (T)a->beta1, b2 = (T)a->beta2;                \
    T eps = (T)a->epsilon, c1 = 1 - b1, c2 = 1 - b2;                         \
    T decay = (T)a->decay, bc2 = (T)a->bc2_sqrt;                             \
    for (int64_t i = b; i < e; i++) {                                        \
      T gi = g[i];                                                           \
      T mi = b1 * m[i] + c1 * gi;                                            \
      T vi = b2 * v[i] + c2 * gi * gi;                                       \
      m[i] = mi;                                                             \
      v[i] = vi;                                                             \
      x[i] = x[i] * decay - step * mi / (SQRT(vi) / bc2 + eps);              \
    }                                                                        \
  }                                                                          \
  static void momentum_##T(T *restrict x, T *restrict acc,                   \
                           const T *restrict g, const update_args *a,        \
                           int64_t b, int64_t e) {                           \
    T lr = (T)a->alpha, mu = (T)a->momentum;                                 \
    for (int64_t i = b; i < e; i++) {                                        \
      T ai = mu * acc[i] + g[i];                                             \
      acc[i] = ai;                                                           \
      x[i] -= a->nesterov ? g[i] * lr + ai * mu * lr : lr * ai;              \
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
  rf__denormal_scope ftz = rf__denormal_flush_begin(); /* see denormal.h */
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
  rf__denormal_flush_end(ftz);
}

static void adamw_chunk(void *arg, int64_t b, int64_t e) {
  const update_args *a = arg;
  rf__denormal_scope ftz = rf__denormal_flush_begin(); /* as Adam's */
  if (a->dtype == RF_FLOAT32) {
    adamw_float(a->var, a->m, a->v, a->delta, a, b, e);
  } else if (a->dtype == RF_FLOAT64) {
    adamw_double(a->var, a->m, a->v, a->delta, a, b, e);
  } else {
    to_float_fn to;
    from_float_fn from;
    half_conv(a->dtype, &to, &from);
    uint16_t *x = a->var, *m = a->m, *v = a->v;
    const uint16_t *g = a->delta;
    float step = (float)a->alpha, b1 = (float)a->beta1, b2 = (float)a->beta2;
    float eps = (float)a->epsilon, decay = (float)a->decay;
    float bc2 = (float)a->bc2_sqrt;
    for (int64_t i = b; i < e; i++) {
      float gi = to(g[i]);
      float mi = b1 * to(m[i]) + (1 - b1) * gi;
      float vi = b2 * to(v[i]) + (1 - b2) * gi * gi;
      m[i] = from(mi);
      v[i] = from(vi);
      x[i] = from(to(x[i]) * decay - step * mi / (sqrtf(vi) / bc2 + eps));
    }
  }
  rf__denormal_flush_end(ftz);
}

static void momentum_chunk(void *arg, int64_t b, int64_t e) {
  const update_args *a = arg;
  if (a->dtype == RF_FLOAT32) {
    momentum_float(a->var, a->m, a->delta, a, b, e);
  } else if (a->dtype == RF_FLOAT64) {
    momentum_double(a->var, a->m, a->delta, a, b, e);
  } else {
    to_float_fn to;
    from_float_fn from;
    half_conv(a->dtype, &to, &from);
    uint16_t *x = a->var, *acc = a->m;
    const uint16_t *g = a->delta;
    float lr = (float)a->alpha, mu = (float)a->momentum;
    for (int64_t i = b; i < e; i++) {
      float gi = to(g[i]), ai = mu * to(acc[i]) + gi;
      acc[i] = from(ai);
      x[i] = from(to(x[i]) - (a->nesterov ? gi * lr + ai * mu * lr : lr * ai));
    }
  }
}

/* ---- ApplyGradientDescent, ApplyAdam, ApplyAdamW, ApplyMomentum ---- */

static rf_status *apply_gd_compute(rf__kernel_ctx *ctx) {
  rf__variable *v = NULL;
  const rf_tensor *delta = ctx->inputs[2];
  rf_tensor *dst = NULL;
  RF_CHECK(rf__state_gd_prepare(ctx, false, &v));
  pthread_mutex_lock(&v->mu);
  rf_status *st = rf__state_check_update(ctx, v, delta->dtype, &delta->shape,
                                         "delta", false);
  if (!st) st = writable_value(ctx, v, &dst);
  if (!st) {
    update_args a = {.dtype = delta->dtype,
                     .var = dst->data,
                     .delta = delta->data,
                     .alpha = rf_tensor_get(ctx->inputs[1], 0)};
    rf__kernel_parallel_for(ctx, dst->num_elements, 4, gd_chunk, &a);
    rf__state_install_value(v, dst);
  }
  pthread_mutex_unlock(&v->mu);
  return st;
}

static double input_scalar(rf__kernel_ctx *ctx, int k) {
  return rf_tensor_get(ctx->inputs[k], 0);
}

/* Each update's scalars, read after the checks (apply_update). */
typedef rf_status *(*scalars_fn)(rf__kernel_ctx *ctx, update_args *a);

static rf_status *adam_scalars(rf__kernel_ctx *ctx, update_args *a) {
  double b1p = input_scalar(ctx, 3), b2p = input_scalar(ctx, 4);
  a->alpha = input_scalar(ctx, 5) * sqrt(1 - b2p) / (1 - b1p);
  a->beta1 = input_scalar(ctx, 6);
  a->beta2 = input_scalar(ctx, 7);
  a->epsilon = input_scalar(ctx, 8);
  return NULL;
}

/* PyTorch's AdamW: var = var (1 - lr wd) - lr / (1 - beta1_power) * m /
 * (sqrt(v) / sqrt(1 - beta2_power) + epsilon), the moments updated first. */
static rf_status *adamw_scalars(rf__kernel_ctx *ctx, update_args *a) {
  double b1p = input_scalar(ctx, 3), b2p = input_scalar(ctx, 4);
  double lr = input_scalar(ctx, 5);
  a->alpha = lr / (1 - b1p);
  a->bc2_sqrt = sqrt(1 - b2p);
  a->beta1 = input_scalar(ctx, 6);
  a->beta2 = input_scalar(ctx, 7);
  a->epsilon = input_scalar(ctx, 8);
  a->decay = 1 - lr * input_scalar(ctx, 9);
  return NULL;
}

static rf_status *momentum_scalars(rf__kernel_ctx *ctx, update_args *a) {
  a->alpha = input_scalar(ctx, 2);
  a->momentum = input_scalar(ctx, 4);
  return rf__attrs_get_bool(&ctx->node->attrs, "use_nesterov", &a->nesterov);
}

/* An update of spec's variables (var, then its slots) by `chunk` over
 * grad's elements; all or nothing. */
static rf_status *apply_update(rf__kernel_ctx *ctx,
                               const rf__state_update_spec *spec,
                               scalars_fn scalars,
                               void (*chunk)(void *, int64_t, int64_t),
                               int64_t cost) {
  rf__variable *vars[3], *sorted[3];
  rf_tensor *dst[3] = {NULL, NULL, NULL};
  const rf_tensor *grad = ctx->inputs[spec->grad];
  update_args a = {.dtype = grad->dtype, .delta = grad->data};
  int n = spec->nvars;
  RF_CHECK(rf__state_update_prepare(ctx, false, spec, vars, sorted));
  rf_status *st = scalars(ctx, &a);
  if (st) return rf__kernel_error_at(ctx, st);
  rf__state_lock_distinct(sorted, n, true);
  for (int k = 0; k < n && !st; k++)
    st = rf__state_check_update(ctx, vars[k], grad->dtype, &grad->shape, "grad",
                                false);
  for (int k = 0; k < n && !st; k++) st = writable_value(ctx, vars[k], &dst[k]);
  if (!st) {
    a.var = dst[0]->data;
    a.m = dst[1]->data;
    a.v = n > 2 ? dst[2]->data : NULL;
    rf__kernel_parallel_for(ctx, grad->num_elements, cost, chunk, &a);
    for (int k = 0; k < n; k++) rf__state_install_value(vars[k], dst[k]);
  } else {
    for (int k = 0; k < n; k++) rf__state_drop_value(vars[k], dst[k]);
  }
  rf__state_lock_distinct(sorted, n, false);
  return st;
}

static rf_status *apply_adam_compute(rf__kernel_ctx *ctx) {
  return apply_update(ctx, &rf__state_adam_spec, adam_scalars, adam_chunk, 30);
}

static rf_status *apply_adamw_compute(rf__kernel_ctx *ctx) {
  return apply_update(ctx, &rf__state_adamw_spec, adamw_scalars, adamw_chunk,
                      34);
}

static rf_status *apply_momentum_compute(rf__kernel_ctx *ctx) {
  return apply_update(ctx, &rf__state_momentum_spec, momentum_scalars,
                      momentum_chunk, 8);
}

static const rf__kernel_def state_kernels[] = {
    RF_STATE_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_state_kernels(void) {
  return rf__kernel_register_all(
      state_kernels, sizeof state_kernels / sizeof state_kernels[0]);
}
