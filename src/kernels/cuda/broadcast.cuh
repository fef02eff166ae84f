/* kernels/cuda/broadcast.cuh - numpy broadcasting on the GPU: the CPU's
 * plan (kernels/cpu/elementwise_binary.c) - size-1 output dims dropped,
 * neighbours merged while both operands stay linear across them - and one
 * grid-stride kernel o[i] = f(a[offset_a(i)], b[offset_b(i)]) over it. A
 * rank-1 plan (same shapes, or a scalar operand) needs no index arithmetic.
 * Used by the binary ops, _BroadcastToShapeOf and _SumGrad/_MeanGrad. */
#ifndef RF_KERNELS_CUDA_BROADCAST_CUH
#define RF_KERNELS_CUDA_BROADCAST_CUH

#include "kernels/cuda/gpu_common.cuh"

namespace rf_gpu {

struct Plan {
  int rank; /* >= 1 */
  int64_t dims[RF_MAX_RANK];
  int64_t sa[RF_MAX_RANK]; /* element strides; 0 where broadcast */
  int64_t sb[RF_MAX_RANK];
};

/* Strides of x's dims aligned to the output's rank (0 for missing or
 * broadcast dims). */
inline void aligned_strides(const rf_shape *x, int rank, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    int k = x->rank - rank + i;
    int64_t d = k >= 0 ? x->dims[k] : 1;
    st[i] = d == 1 ? 0 : s;
    s *= d;
  }
}

/* The plan for a and b (each broadcastable to os) producing os. */
inline void plan_make(const rf_shape *as, const rf_shape *bs,
                      const rf_shape *os, Plan *p) {
  int64_t sa[RF_MAX_RANK], sb[RF_MAX_RANK];
  aligned_strides(as, os->rank, sa);
  aligned_strides(bs, os->rank, sb);
  p->rank = 0;
  for (int i = 0; i < os->rank; i++) {
    int64_t d = os->dims[i];
    if (d == 1) continue;
    int r = p->rank;
    if (r > 0 && p->sa[r - 1] == sa[i] * d && p->sb[r - 1] == sb[i] * d) {
      p->dims[r - 1] *= d; /* both operands linear across the pair: merge */
      p->sa[r - 1] = sa[i];
      p->sb[r - 1] = sb[i];
      continue;
    }
    p->dims[r] = d;
    p->sa[r] = sa[i];
    p->sb[r] = sb[i];
    p->rank++;
  }
  if (p->rank == 0) { /* one element */
    p->rank = 1;
    p->dims[0] = 1;
    p->sa[0] = p->sb[0] = 1;
  }
}

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
  plan_make(as, bs, os, &p);
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
