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
  bool adamw;
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

/* AssignMul: dst *= value, 16-bit floats through float. */
static rf_status *mul_in_place(rf__kernel_ctx *ctx, rf_tensor *dst,
                               const rf_tensor *value) {
  (void)ctx;
  int64_t n = dst->num_elements;
  if (dst->dtype == RF_FLOAT32) {
    float *x = dst->data;
    const float *y = value->data;
    for (int64_t i = 0; i < n; i++) x[i] *= y[i];
  } else if (dst->dtype == RF_FLOAT64) {
    double *x = dst->data;
    const double *y = value->data;
    for (int64_t i = 0; i < n; i++) x[i] *= y[i];
  } else {
    to_float_fn to;
    from_float_fn from;
    half_conv(dst->dtype, &to, &from);
    uint16_t *x = dst->data;
    const uint16_t *y = value->data;
    for (int64_t i = 0; i < n; i++) x[i] = from(to(x[i]) * to(y[i]));
  }
  return NULL;
}

static rf_status *assign_mul_compute(rf__kernel_ctx *ctx) {
  return rf__state_assign_mul_run(ctx, false, writable_value, mul_in_place);
}

/* _MultiAssignMul: every tensor as AssignMul multiplies it; the new values
 * (installed once this returns) are the outputs. */
static rf_status *multi_mul(rf__kernel_ctx *ctx, const rf__state_update *u,
                            const void *arg) {
  (void)arg;
  for (int i = 0; i < u->n; i++)
    RF_CHECK(mul_in_place(ctx, u->dst[i], rf__state_grad(ctx, u, i)));
  for (int i = 0; i < u->n; i++) ctx->outputs[i] = rf_tensor_retain(u->dst[i]);
  return NULL;
}

static rf_status *multi_assign_mul_compute(rf__kernel_ctx *ctx) {
  return rf__state_update_run(ctx, false, &rf__state_assign_mul_spec,
                              writable_value, multi_mul, NULL);
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

/* Adam and AdamW (a->adamw: PyTorch's decoupled weight decay). */
static void adam_chunk(void *arg, int64_t b, int64_t e) {
  const update_args *a = arg;
  rf__denormal_scope ftz = rf__denormal_flush_begin(); /* see denormal.h */
  if (a->dtype == RF_FLOAT32) {
    (a->adamw ? adamw_float : adam_float)(a->var, a->m, a->v, a->delta, a, b,
                                          e);
  } else if (a->dtype == RF_FLOAT64) {
    (a->adamw ? adamw_double : adam_double)(a->var, a->m, a->v, a->delta, a, b,
                                            e);
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
      float xi = to(x[i]);
      x[i] = from(a->adamw ? xi * decay - step * mi / (sqrtf(vi) / bc2 + eps)
                           : xi - step * mi / (sqrtf(vi) + eps));
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

/* Scalar j (the single op's input index) of an update, as double. */
static double input_scalar(rf__kernel_ctx *ctx, const rf__state_update *u,
                           int j) {
  double v = rf_tensor_get(rf__state_scalar(ctx, u, j), 0);
  /* a float64 beta power of a float32 update, as its Cast would give it */
  return rf__state_power_f64(ctx, u, j) ? (double)(float)v : v;
}

/* Each update's scalars, read after the checks (rf__state_update_run). */
typedef rf_status *(*scalars_fn)(rf__kernel_ctx *ctx, const rf__state_update *u,
                                 update_args *a);

static rf_status *adam_scalars(rf__kernel_ctx *ctx, const rf__state_update *u,
                               update_args *a) {
  double b1p = input_scalar(ctx, u, 3), b2p = input_scalar(ctx, u, 4);
  a->alpha = input_scalar(ctx, u, 5) * sqrt(1 - b2p) / (1 - b1p);
  a->beta1 = input_scalar(ctx, u, 6);
  a->beta2 = input_scalar(ctx, u, 7);
  a->epsilon = input_scalar(ctx, u, 8);
  return NULL;
}

/* PyTorch's AdamW: var = var (1 - lr wd) - lr / (1 - beta1_power) * m /
 * (sqrt(v) / sqrt(1 - beta2_power) + epsilon), the moments updated first. */
static rf_status *adamw_scalars(rf__kernel_ctx *ctx, const rf__state_update *u,
                                update_args *a) {
  double b1p = input_scalar(ctx, u, 3), b2p = input_scalar(ctx, u, 4);
  double lr = input_scalar(ctx, u, 5);
  a->alpha = lr / (1 - b1p);
  a->bc2_sqrt = sqrt(1 - b2p);
  a->beta1 = input_scalar(ctx, u, 6);
  a->beta2 = input_scalar(ctx, u, 7);
  a->epsilon = input_scalar(ctx, u, 8);
  a->decay = 1 - lr * input_scalar(ctx, u, 9);
  a->adamw = true;
  return NULL;
}

static rf_status *momentum_scalars(rf__kernel_ctx *ctx,
                                   const rf__state_update *u, update_args *a) {
  a->alpha = input_scalar(ctx, u, 2);
  a->momentum = input_scalar(ctx, u, 4);
  return rf__attrs_get_bool(&ctx->node->attrs, "use_nesterov", &a->nesterov);
}

/* How one kind of update computes: its scalars, its loop over a range of
 * elements, and that loop's cost per element. */
typedef struct update_kind {
  scalars_fn scalars;
  void (*chunk)(void *, int64_t, int64_t);
  int64_t cost;
} update_kind;

/* Each tensor in turn, with the element loops of the ungrouped op, so a
 * _MultiApply* node gives the bits of its ops one by one. */
static rf_status *update_compute(rf__kernel_ctx *ctx, const rf__state_update *u,
                                 const void *arg) {
  const update_kind *kind = arg;
  int n = u->n;
  update_args a = {.dtype = rf__state_grad(ctx, u, 0)->dtype};
  rf_status *st = kind->scalars(ctx, u, &a);
  if (st) return rf__kernel_error_at(ctx, st);
  for (int i = 0; i < n; i++) {
    const rf_tensor *grad = rf__state_grad(ctx, u, i);
    a.delta = grad->data;
    a.var = u->dst[i]->data;
    a.m = u->dst[n + i]->data;
    a.v = u->spec->nvars > 2 ? u->dst[2 * n + i]->data : NULL;
    rf__kernel_parallel_for(ctx, grad->num_elements, kind->cost, kind->chunk,
                            &a);
  }
  return NULL;
}

static const update_kind adam_kind = {adam_scalars, adam_chunk, 30};
static const update_kind adamw_kind = {adamw_scalars, adam_chunk, 34};
static const update_kind momentum_kind = {momentum_scalars, momentum_chunk, 8};

static rf_status *apply_adam_compute(rf__kernel_ctx *ctx) {
  return rf__state_update_run(ctx, false, &rf__state_adam_spec, writable_value,
                              update_compute, &adam_kind);
}

static rf_status *apply_adamw_compute(rf__kernel_ctx *ctx) {
  return rf__state_update_run(ctx, false, &rf__state_adamw_spec, writable_value,
                              update_compute, &adamw_kind);
}

static rf_status *apply_momentum_compute(rf__kernel_ctx *ctx) {
  return rf__state_update_run(ctx, false, &rf__state_momentum_spec,
                              writable_value, update_compute, &momentum_kind);
}

static const rf__kernel_def state_kernels[] = {
    RF_STATE_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_state_kernels(void) {
  return rf__kernel_register_all(
      state_kernels, sizeof state_kernels / sizeof state_kernels[0]);
}
