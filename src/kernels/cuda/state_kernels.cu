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
#include <stdlib.h>
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

/* ---- AssignMul ---- */

/* x *= y, in T's compute type (float for 16-bit floats). */
template <typename T>
__global__ void mul_kernel(T *x, const T *y, int64_t n) {
  RF_GPU_LOOP(i, n) {
    x[i] = Num<T>::store(Num<T>::load(x[i]) * Num<T>::load(y[i]));
  }
}

rf_status *mul_in_place(rf__kernel_ctx *ctx, rf_tensor *dst,
                        const rf_tensor *value) {
  int64_t n = dst->num_elements;
  if (n == 0) return NULL;
  return visit_float(dst->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mul_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        (T *)dst->data, (const T *)value->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

/* The multiply is a kernel on the variable device's stream: in place it
 * keeps the variable's buffer, so a captured step replays it there. */
rf_status *assign_mul_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  return rf__state_assign_mul_run(ctx, true, writable_value, mul_in_place);
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

/* ---- multi-tensor updates: one launch for every tensor of a node ----
 *
 * ApplyAdam, ApplyAdamW, ApplyMomentum and their _MultiApply* forms (N
 * tensors, passes/group_updates.c) all launch multi_kernel once: its
 * argument holds each tensor's arrays (var, its slots, grad) and the first
 * of its chunks of l.chunk elements; each block takes chunks in turn,
 * finds their tensor by binary search and runs the one element function of its
 * update. One node's tensors in one launch keep the update all or nothing:
 * RF_STATE_MAX_TENSORS of them fit the 4 KB of kernel parameters every
 * CUDA device takes (PyTorch's multi_tensor_apply splits a list the same
 * way; the grouping pass splits longer lists into several nodes). */

template <typename T, int D>
struct TensorList {
  T *p[D][RF_STATE_MAX_TENSORS]; /* var, its slots, then grad (read only) */
  int64_t chunk;                 /* elements per chunk */
  int64_t n[RF_STATE_MAX_TENSORS];
  int64_t chunk_start[RF_STATE_MAX_TENSORS + 1];
  int count;
};
static_assert(sizeof(TensorList<double, 4>) + 128 <= 4096,
              "a node's tensors and scalars fit one launch");

/* Adam's (and AdamW's) scalars, device pointers in input order: read by
 * the kernel, in double as on the CPU, so a captured step reads each
 * replay's values. */
template <typename T, bool W>
struct AdamOp {
  using C = typename Num<T>::C;
  /* The powers are T, or float64 where f64_1 / f64_2 (float32 updates of a
   * _MultiApplyAdam* with Tpower float64): rounded to float then, as the
   * Cast they replace did (kernels/state_prepare.h). */
  const void *beta1_power, *beta2_power;
  const T *lr, *beta1, *beta2, *epsilon;
  const T *weight_decay; /* W only */
  bool f64_1, f64_2;     /* beta1_power, beta2_power are float64 */
  struct Run {
    C step, b1, b2, eps, c1, c2, decay, bc2;
    /* Adam: lr_t = lr sqrt(1 - beta2_power) / (1 - beta1_power), then
     *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
     *   x -= lr_t m / (sqrt(v) + epsilon).
     * AdamW, PyTorch's formula (ops.h: rf_apply_adamw):
     *   x = x (1 - lr wd) - lr / (1 - beta1_power) m /
     *       (sqrt(v) / sqrt(1 - beta2_power) + epsilon). */
    __device__ void operator()(T *const *p, int64_t i) const {
      C gi = Num<T>::load(p[3][i]);
      C mi = b1 * Num<T>::load(p[1][i]) + c1 * gi;
      C vi = b2 * Num<T>::load(p[2][i]) + c2 * gi * gi;
      p[1][i] = Num<T>::store(mi);
      p[2][i] = Num<T>::store(vi);
      C xi = Num<T>::load(p[0][i]);
      p[0][i] =
          Num<T>::store(W ? xi * decay - step * mi / (sqrt(vi) / bc2 + eps)
                          : xi - step * mi / (sqrt(vi) + eps));
    }
  };
  __device__ Run load() const {
    auto rd = [](const T *q) { return (double)Num<T>::load(*q); };
    auto power = [&](const void *q, bool f64) {
      return f64 ? (double)(float)*(const double *)q : rd((const T *)q);
    };
    const double b1p = power(beta1_power, f64_1);
    const double b2p = power(beta2_power, f64_2);
    const double l = rd(lr);
    Run r;
    r.b1 = (C)rd(beta1), r.b2 = (C)rd(beta2), r.eps = (C)rd(epsilon);
    r.c1 = 1 - r.b1, r.c2 = 1 - r.b2;
    if (W) {
      r.step = (C)(l / (1 - b1p)), r.bc2 = (C)sqrt(1 - b2p);
      r.decay = (C)(1 - l * rd(weight_decay));
    } else {
      r.step = (C)(l * sqrt(1 - b2p) / (1 - b1p));
      r.bc2 = r.decay = 1;
    }
    return r;
  }
};

/* TensorFlow's ApplyMomentum: acc = mu acc + g; x -= lr acc, or with
 * Nesterov x -= g lr + acc mu lr. */
template <typename T>
struct MomentumOp {
  using C = typename Num<T>::C;
  const T *lr, *momentum;
  bool nesterov;
  struct Run {
    C lr, mu;
    bool nesterov;
    __device__ void operator()(T *const *p, int64_t i) const {
      C gi = Num<T>::load(p[2][i]);
      C ai = mu * Num<T>::load(p[1][i]) + gi;
      p[1][i] = Num<T>::store(ai);
      p[0][i] = Num<T>::store(Num<T>::load(p[0][i]) -
                              (nesterov ? gi * lr + ai * mu * lr : lr * ai));
    }
  };
  __device__ Run load() const {
    return Run{Num<T>::load(*lr), Num<T>::load(*momentum), nesterov};
  }
};

/* _MultiAssignMul: x *= value, as mul_kernel computes it. */
template <typename T>
struct MulOp {
  struct Run {
    __device__ void operator()(T *const *p, int64_t i) const {
      p[0][i] = Num<T>::store(Num<T>::load(p[0][i]) * Num<T>::load(p[1][i]));
    }
  };
  __device__ Run load() const { return Run{}; }
};

template <typename T, int D, typename Op>
__global__ void multi_kernel(const __grid_constant__ TensorList<T, D> l,
                             const Op op) {
  const typename Op::Run run = op.load();
  const int64_t total = l.chunk_start[l.count];
  for (int64_t c = blockIdx.x; c < total; c += gridDim.x) {
    int lo = 0, hi = l.count - 1; /* the last tensor starting at or before c */
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (l.chunk_start[mid] <= c)
        lo = mid;
      else
        hi = mid - 1;
    }
    T *p[D];
    for (int d = 0; d < D; d++) p[d] = l.p[d][lo];
    const int64_t b = (c - l.chunk_start[lo]) * l.chunk;
    const int64_t e = b + l.chunk < l.n[lo] ? b + l.chunk : l.n[lo];
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) run(p, i);
  }
}

/* One launch of op over u's tensors (D arrays each: its variables' writable
 * values, then grad); empty tensors are left out. */
template <typename T, int D, typename Op>
rf_status *multi_launch(rf__kernel_ctx *ctx, const rf__state_update *u,
                        const Op &op) {
  TensorList<T, D> l;
  /* 512 elements (2 per thread) by default, so a model of half a million
   * parameters fills the GPU with blocks: each thread's elements are
   * dependent round trips to memory (the updates write what the next
   * element's loads might alias). RF_GPU_UPDATE_CHUNK sets another size. */
  l.chunk = ctx->device->gpu_update_chunk > 0 ? ctx->device->gpu_update_chunk
                                              : 2 * kThreads;
  int n = u->n, count = 0;
  int64_t chunks = 0;
  for (int i = 0; i < n; i++) {
    const rf_tensor *g = rf__state_grad(ctx, u, i);
    if (g->num_elements == 0) continue;
    for (int d = 0; d + 1 < D; d++)
      l.p[d][count] = (T *)u->dst[d * n + i]->data;
    l.p[D - 1][count] = (T *)g->data;
    l.n[count] = g->num_elements;
    l.chunk_start[count++] = chunks;
    chunks += (g->num_elements + l.chunk - 1) / l.chunk;
  }
  if (count == 0) return NULL;
  l.count = count;
  l.chunk_start[count] = chunks;
  multi_kernel<T, D, Op>
      <<<grid(ctx, chunks * kThreads), kThreads, 0, stream(ctx)>>>(l, op);
  RF_GPU_LAUNCHED(ctx);
  return NULL;
}

/* The launch of an update's kind (spec) in grad's dtype (_MultiAssignMul's
 * value's), with its outputs (_MultiAssignMul's new values). */
rf_status *update_compute(rf__kernel_ctx *ctx, const rf__state_update *u,
                          const void *) {
  const rf__state_update_spec *spec = u->spec;
  bool nesterov = false;
  if (spec == &rf__state_momentum_spec)
    RF_CHECK(rf__attrs_get_bool(&ctx->node->attrs, "use_nesterov", &nesterov));
  return visit_float(rf__state_grad(ctx, u, 0)->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto in = [&](int j) {
      return (const T *)rf__state_scalar(ctx, u, j)->data;
    };
    if (spec == &rf__state_assign_mul_spec) {
      RF_CHECK((multi_launch<T, 2>(ctx, u, MulOp<T>{})));
      for (int i = 0; i < u->n; i++) /* installed once this returns */
        ctx->outputs[i] = rf_tensor_retain(u->dst[i]);
      return (rf_status *)NULL;
    }
    if (spec == &rf__state_momentum_spec)
      return multi_launch<T, 3>(ctx, u, MomentumOp<T>{in(2), in(4), nesterov});
    auto raw = [&](int j) {
      return (const void *)rf__state_scalar(ctx, u, j)->data;
    };
    bool f1 = rf__state_power_f64(ctx, u, 3),
         f2 = rf__state_power_f64(ctx, u, 4);
    if (spec == &rf__state_adamw_spec)
      return multi_launch<T, 4>(ctx, u,
                                AdamOp<T, true>{raw(3), raw(4), in(5), in(6),
                                                in(7), in(8), in(9), f1, f2});
    return multi_launch<T, 4>(ctx, u,
                              AdamOp<T, false>{raw(3), raw(4), in(5), in(6),
                                               in(7), in(8), nullptr, f1, f2});
  });
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

/* An update of a node's tensors, all or nothing (kernels/state_prepare.h). */
rf_status *apply_update(rf__kernel_ctx *ctx,
                        const rf__state_update_spec *spec) {
  RF_CHECK(begin(ctx));
  return rf__state_update_run(ctx, true, spec, writable_value, update_compute,
                              NULL);
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
rf_status *multi_assign_mul_compute(rf__kernel_ctx *ctx) {
  return apply_update(ctx, &rf__state_assign_mul_spec);
}

const rf__kernel_def defs[] = {RF_STATE_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_state_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
