/* kernels/cuda/array_kernels.cu - GPU kernels of the array ops. Const copies
 * its value to the device once (on first run: init sees no device) and then
 * hands out that device tensor; Identity forwards, Reshape returns a view;
 * Shape writes host memory and Reshape's shape / Fill's dims are read from
 * host memory (the kernels' host-memory bits), so nothing here waits for
 * the GPU. Fill's value is a device scalar that the kernel reads itself. */
#include <pthread.h>
#include <string.h>

#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

#include "kernels/array_prepare.h"

extern "C" {
#include "core/mem.h"
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

/* ---- Const ---- */

struct ConstState {
  pthread_mutex_t mu;
  rf_tensor *value;  /* the attr's host tensor (retained) */
  rf_tensor *device; /* its device copy, made by the first run */
};

rf_status *const_init(const rf_node *node, void **state) {
  rf_tensor *value;
  RF_CHECK(rf__const_value(node, &value));
  ConstState *s = (ConstState *)rf__calloc(1, sizeof *s);
  RF_CHECK_ALLOC(s);
  pthread_mutex_init(&s->mu, NULL);
  s->value = rf_tensor_retain(value);
  *state = s;
  return NULL;
}

/* The session frees kernel states before its devices, so the device copy
 * goes back to a live allocator, after the step's streams were synced. */
void const_destroy(void *state) {
  ConstState *s = (ConstState *)state;
  rf_tensor_release(s->device);
  rf_tensor_release(s->value);
  pthread_mutex_destroy(&s->mu);
  rf__free(s);
}

/* Makes s->device; s->mu held. */
rf_status *upload(rf__kernel_ctx *ctx, ConstState *s) {
  const rf_tensor *v = s->value;
  rf_tensor *t;
  RF_CHECK(new_tensor(ctx, v->dtype, &v->shape, &t));
  if (v->nbytes) {
    /* From pageable memory: staged before the call returns. */
    cudaError_t err = cudaMemcpyAsync(t->data, v->data, v->nbytes,
                                      cudaMemcpyHostToDevice, stream(ctx));
    if (err != cudaSuccess) {
      rf_tensor_release(t);
      return error(ctx, err, "cudaMemcpyAsync(Const value)", __FILE__,
                   __LINE__);
    }
  }
  s->device = t;
  return NULL;
}

rf_status *const_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  ConstState *s = (ConstState *)ctx->state;
  pthread_mutex_lock(&s->mu);
  rf_status *st = s->device ? NULL : upload(ctx, s);
  if (!st) ctx->outputs[0] = rf_tensor_retain(s->device);
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* ---- Placeholder, Identity, NoOp, Reshape, Shape ----
 * kernels/array_prepare.c; Reshape's shape and Shape's output are host
 * memory (the kernels' host-memory bits). */

/* A host-memory input must arrive in host memory (the runtime's job); never
 * read a device pointer on the host. */
rf_status *host_input(const rf__kernel_ctx *ctx, int k) {
  if (!ctx->inputs[k]->on_gpu) return NULL;
  return rf__kernel_error(ctx, RF_INTERNAL,
                          "input %d should be in host memory, got device "
                          "memory",
                          k);
}

rf_status *reshape_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(host_input(ctx, 1));
  return rf__reshape_compute(ctx);
}

rf_status *shape_compute(rf__kernel_ctx *ctx) {
  return rf__shape_compute(ctx, true);
}

/* ---- Fill, ZerosLike, OnesLike ---- */

template <typename U>
__global__ void fill_from_kernel(U *dst, int64_t n, const U *value) {
  U v = *value;
  RF_GPU_LOOP(i, n) dst[i] = v;
}

rf_status *fill_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *value = ctx->inputs[1];
  rf_shape shape;
  RF_CHECK(host_input(ctx, 0));
  RF_CHECK(rf__fill_prepare(ctx, &shape));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, value->dtype, &shape, &out));
  int64_t n = out->num_elements;
  if (n == 0) return NULL;
  return visit_bits(rf_dtype_size(value->dtype), [&](auto tag) {
    using U = typename decltype(tag)::type;
    fill_from_kernel<U><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        (U *)out->data, n, (const U *)value->data);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *zeros_like_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0];
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &out));
  /* all-zero bits are 0 in every dtype */
  return fill_bits(ctx, out->data, rf_dtype_size(x->dtype), out->num_elements,
                   0);
}

rf_status *ones_like_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0];
  rf_tensor *one, *out;
  /* rf_tensor_set writes 1 in the dtype's own encoding (half, bool...). */
  RF_CHECK(rf_tensor_new_scalar(x->dtype, 1.0, &one));
  uint64_t bits = 0;
  memcpy(&bits, one->data, rf_dtype_size(x->dtype));
  rf_tensor_release(one);
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &x->shape, &out));
  return fill_bits(ctx, out->data, rf_dtype_size(x->dtype), out->num_elements,
                   bits);
}

const rf__kernel_def defs[] = {
    /* Const has an init and a destroy: not in RF_ARRAY_KERNELS */
    {.op = "Const",
     .device_type = RF_DEVICE_GPU,
     .init = const_init,
     .destroy = const_destroy,
     .compute = const_compute},
    RF_ARRAY_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_array_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
