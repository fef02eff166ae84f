/* kernels/cuda/index_kernels.cu - GPU kernels of Gather (an index outside
 * [0, n) gives a zero row, as TensorFlow's GPU kernel: checking it would
 * cost a device-to-host wait), _GatherGrad (atomicAdd scatter into a zeroed
 * output, float16/bfloat16 through a float32 scratch buffer; the summation
 * order is unspecified, out-of-range indices are skipped), OneHot and Select
 * (broadcast strides from kernels/index_prepare.h). */
#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

#include "kernels/index_prepare.h"

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

template <typename I>
__device__ __forceinline__ int64_t idx_at(const void *p, int64_t j) {
  return (int64_t)((const I *)p)[j];
}

__device__ __forceinline__ int64_t index_of(const void *p, int esize,
                                            int64_t j) {
  return esize == 4   ? idx_at<int32_t>(p, j)
         : esize == 8 ? idx_at<int64_t>(p, j)
                      : idx_at<uint8_t>(p, j);
}

/* ---- Gather ---- */

template <typename U>
__global__ void gather_kernel(rf__gather_dims d, const U *params,
                              const void *idx, int iesize, U *out,
                              int64_t count) {
  RF_GPU_LOOP(e, count) {
    int64_t i = e % d.inner, r = e / d.inner, j = r % d.k, o = r / d.k;
    int64_t v = index_of(idx, iesize, j);
    out[e] = v >= 0 && v < d.n ? params[(o * d.n + v) * d.inner + i] : U(0);
  }
}

rf_status *gather_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__gather_dims d;
  RF_CHECK(rf__gather_prepare(ctx, &d));
  const rf_tensor *params = ctx->inputs[0], *idx = ctx->inputs[1];
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, params->dtype, &d.out, &out));
  int64_t n = out->num_elements;
  if (n == 0) return NULL;
  return visit_bits(rf_dtype_size(params->dtype), [&](auto tag) {
    using U = typename decltype(tag)::type;
    gather_kernel<U><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        d, (const U *)params->data, idx->data, (int)rf_dtype_size(idx->dtype),
        (U *)out->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

/* ---- _GatherGrad ---- */

template <typename T, typename A>
__global__ void scatter_kernel(rf__gather_dims d, const T *dy, const void *idx,
                               int iesize, A *acc, int64_t count) {
  RF_GPU_LOOP(e, count) {
    int64_t i = e % d.inner, r = e / d.inner, j = r % d.k, o = r / d.k;
    int64_t v = index_of(idx, iesize, j);
    if (v >= 0 && v < d.n)
      atomicAdd(&acc[(o * d.n + v) * d.inner + i], (A)Num<T>::load(dy[e]));
  }
}

template <typename T>
__global__ void round_kernel(const float *acc, T *out, int64_t n) {
  RF_GPU_LOOP(i, n) out[i] = Num<T>::store(acc[i]);
}

rf_status *gather_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__gather_dims d;
  RF_CHECK(rf__gather_prepare(ctx, &d));
  const rf_tensor *dy = ctx->inputs[0], *idx = ctx->inputs[1];
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, dy->dtype, &d.out, &out));
  int64_t n = out->num_elements, m = dy->num_elements;
  int ies = (int)rf_dtype_size(idx->dtype);
  if (n == 0) return NULL;
  if (dy->dtype == RF_FLOAT32 || dy->dtype == RF_FLOAT64) {
    RF_CHECK(fill_bits(ctx, out->data, rf_dtype_size(dy->dtype), n, 0));
    if (m == 0) return NULL;
    return visit_float(dy->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      scatter_kernel<T, T><<<grid(ctx, m), kThreads, 0, stream(ctx)>>>(
          d, (const T *)dy->data, idx->data, ies, (T *)out->data, m);
      RF_GPU_LAUNCHED(ctx);
      return (rf_status *)NULL;
    });
  }
  /* float16/bfloat16: sum in float32, round once */
  rf_tensor *acc;
  RF_CHECK(new_tensor(ctx, RF_FLOAT32, &d.out, &acc));
  rf_status *st = fill_bits(ctx, acc->data, 4, n, 0);
  if (!st)
    st = visit_float(dy->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (m > 0) {
        scatter_kernel<T, float><<<grid(ctx, m), kThreads, 0, stream(ctx)>>>(
            d, (const T *)dy->data, idx->data, ies, (float *)acc->data, m);
        RF_GPU_LAUNCHED(ctx);
      }
      round_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
          (const float *)acc->data, (T *)out->data, n);
      RF_GPU_LAUNCHED(ctx);
      return (rf_status *)NULL;
    });
  rf_tensor_release(acc); /* safe after enqueueing its last use */
  return st;
}

/* ---- OneHot ---- */

template <typename U>
__global__ void one_hot_kernel(rf__one_hot_dims d, const void *idx, int iesize,
                               U *out, int64_t count) {
  U on = (U)d.on_bits, off = (U)d.off_bits;
  RF_GPU_LOOP(e, count) {
    int64_t i = e % d.inner, r = e / d.inner, c = r % d.depth, o = r / d.depth;
    out[e] = index_of(idx, iesize, o * d.inner + i) == c ? on : off;
  }
}

rf_status *one_hot_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__one_hot_dims d;
  RF_CHECK(rf__one_hot_prepare(ctx, &d));
  rf_dtype dt;
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "T", &dt));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, dt, &d.out, &out));
  int64_t n = out->num_elements;
  if (n == 0) return NULL;
  const rf_tensor *idx = ctx->inputs[0];
  return visit_bits(rf_dtype_size(dt), [&](auto tag) {
    using U = typename decltype(tag)::type;
    one_hot_kernel<U><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        d, idx->data, (int)rf_dtype_size(idx->dtype), (U *)out->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

/* ---- Select ---- */

template <typename U>
__global__ void select_kernel(rf__select_plan p, const uint8_t *c, const U *t,
                              const U *e, U *out) {
  RF_GPU_LOOP(i, p.count) {
    int64_t oc = 0, ot = 0, oe = 0, rest = i;
    for (int k = p.rank - 1; k >= 0; k--) {
      int64_t x = rest % p.dims[k];
      rest /= p.dims[k];
      oc += x * p.strides[0][k];
      ot += x * p.strides[1][k];
      oe += x * p.strides[2][k];
    }
    out[i] = c[oc] ? t[ot] : e[oe];
  }
}

rf_status *select_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__select_plan p;
  RF_CHECK(rf__select_prepare(ctx, &p));
  const rf_tensor *t = ctx->inputs[1];
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, t->dtype, &p.out, &out));
  if (p.count == 0) return NULL;
  return visit_bits(rf_dtype_size(t->dtype), [&](auto tag) {
    using U = typename decltype(tag)::type;
    select_kernel<U><<<grid(ctx, p.count), kThreads, 0, stream(ctx)>>>(
        p, (const uint8_t *)ctx->inputs[0]->data, (const U *)t->data,
        (const U *)ctx->inputs[2]->data, (U *)out->data);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

const rf__kernel_def defs[] = {RF_INDEX_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_index_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
