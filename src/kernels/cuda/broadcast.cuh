/* kernels/cuda/broadcast.cuh - numpy broadcasting on the GPU: the CPU's
 * plan (kernels/broadcast_plan.h) - size-1 output dims dropped,
 * neighbours merged while both operands stay linear across them - and one
 * grid-stride kernel o[i] = f(a[offset_a(i)], b[offset_b(i)]) over it. A
 * rank-1 plan (same shapes, or a scalar operand) needs no index arithmetic.
 * Used by the binary ops, _BroadcastToShapeOf and _SumGrad/_MeanGrad. */
#ifndef RF_KERNELS_CUDA_BROADCAST_CUH
#define RF_KERNELS_CUDA_BROADCAST_CUH

#include "kernels/broadcast_plan.h"
#include "kernels/cuda/gpu_common.cuh"

namespace rf_gpu {

using Plan = rf__broadcast_plan; /* passed to the kernels by value */

/* Offsets into a and b of output element i (row-major over the plan). */
__host__ __device__ __forceinline__ void plan_offsets(const Plan &p, int64_t i,
                                                      int64_t *oa,
                                                      int64_t *ob) {
  if (p.rank == 1) {
    *oa = i * p.sa[0];
    *ob = i * p.sb[0];
    return;
  }
  int64_t a = 0, b = 0;
  for (int k = p.rank - 1; k >= 0; k--) {
    int64_t d = p.dims[k], q = i / d, idx = i - q * d;
    a += idx * p.sa[k];
    b += idx * p.sb[k];
    i = q;
  }
  *oa = a;
  *ob = b;
}

template <typename A, typename B, typename O, typename F>
__global__ void broadcast_kernel(Plan p, int64_t n, const A *a, const B *b,
                                 O *o, F f) {
  RF_GPU_LOOP(i, n) {
    int64_t oa, ob;
    plan_offsets(p, i, &oa, &ob);
    o[i] = f(a[oa], b[ob]);
  }
}

/* Enqueues o = f(a, b) over os (n elements), a and b broadcast from their
 * shapes as and bs. */
template <typename A, typename B, typename O, typename F>
rf_status *broadcast_launch(rf__kernel_ctx *ctx, const void *a,
                            const rf_shape *as, const void *b,
                            const rf_shape *bs, void *o, const rf_shape *os,
                            int64_t n, F f) {
  if (n == 0) return NULL;
  Plan p;
  rf__broadcast_plan_make(as, bs, os, &p);
  broadcast_kernel<A, B, O, F><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
      p, n, (const A *)a, (const B *)b, (O *)o, f);
  RF_GPU_LAUNCHED(ctx);
  return NULL;
}

/* Same for tensors: o = f(a, b) broadcast to o's shape. */
template <typename A, typename B, typename O, typename F>
rf_status *broadcast_launch(rf__kernel_ctx *ctx, const rf_tensor *a,
                            const rf_tensor *b, rf_tensor *o, F f) {
  return broadcast_launch<A, B, O>(ctx, a->data, &a->shape, b->data, &b->shape,
                                   o->data, &o->shape, o->num_elements, f);
}

}  // namespace rf_gpu

#endif
