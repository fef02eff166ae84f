/* kernels/cuda/elementwise_nary.cu - Neg and AddN on GPU devices: flat
 * grid-stride loops over tensors of one shape. AddN adds its inputs in input
 * order per element in the compute type (float for float16/bfloat16, the
 * unsigned type for integers, which wraps) and rounds once, as on the CPU,
 * so float32/float64 results are bit-identical to the CPU's. Up to
 * kInlinePtrs input pointers travel in the launch's parameters; more go
 * through a small device array, which launches filling it (kInlinePtrs
 * pointers each, in their parameters) write: a launch's parameters are
 * copied when it is enqueued or captured, so nothing on the host has to
 * outlive the call. (A copy from a host array did: captured into a CUDA
 * graph, each replay read the array freed after the capture.) */
#include "kernels/cuda/math_kernels.cuh"
#include "kernels/math_prepare.h"

namespace rf_gpu {
namespace {

/* ---- Neg ---- */

/* float16/bfloat16: flip the sign bit (exact; NaN stays NaN). */
__global__ void neg16_kernel(const uint16_t *x, uint16_t *y, int64_t n) {
  RF_GPU_LOOP(i, n) y[i] = (uint16_t)(x[i] ^ 0x8000u);
}

/* -x, not 0 - x, for floats (-0 stays distinct); integers wrap. */
template <typename T>
__global__ void neg_kernel(const T *x, T *y, int64_t n) {
  using U = typename Unsigned<T>::type;
  RF_GPU_LOOP(i, n) {
    if constexpr (std::is_floating_point<T>::value)
      y[i] = -x[i];
    else
      y[i] = (T)(U)((U)0 - (U)x[i]);
  }
}

rf_status *neg_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0];
  rf_dtype dt = x->dtype;
  RF_CHECK(rf__neg_prepare(ctx));
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, dt, &x->shape, &y));
  int64_t n = x->num_elements;
  if (n == 0) return NULL;
  unsigned g = grid(ctx, n);
  if (dt == RF_FLOAT16 || dt == RF_BFLOAT16) {
    neg16_kernel<<<g, kThreads, 0, stream(ctx)>>>((const uint16_t *)x->data,
                                                  (uint16_t *)y->data, n);
    RF_GPU_LAUNCHED(ctx);
    return NULL;
  }
  return visit_numeric(dt, [&](auto tag) -> rf_status * {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || std::is_floating_point<T>::value) {
      neg_kernel<T><<<g, kThreads, 0, stream(ctx)>>>((const T *)x->data,
                                                     (T *)y->data, n);
      RF_GPU_LAUNCHED(ctx);
    }
    return NULL;
  });
}

/* ---- AddN ---- */

constexpr int kInlinePtrs = 32;

template <typename T>
struct InlinePtrs {
  const T *p[kInlinePtrs];
  __device__ const T *operator()(int j) const { return p[j]; }
};

template <typename T>
struct DevicePtrs {
  const T *const *p; /* device memory */
  __device__ const T *operator()(int j) const { return p[j]; }
};

/* Up to kInlinePtrs pointers, by value, for a launch that stores them. */
struct PtrChunk {
  const void *p[kInlinePtrs];
  int n;
};

__global__ void put_ptrs_kernel(PtrChunk c, const void **dst) {
  if (threadIdx.x < (unsigned)c.n) dst[threadIdx.x] = c.p[threadIdx.x];
}

/* The type AddN accumulates T in. */
template <typename T>
using AddAcc = typename std::conditional<is_float_v<T>, typename Num<T>::C,
                                         typename Unsigned<T>::type>::type;

template <typename T, typename Src>
__global__ void add_n_kernel(Src src, int k, int64_t n, T *o) {
  using A = AddAcc<T>;
  RF_GPU_LOOP(i, n) {
    A acc = (A)Num<T>::load(src(0)[i]);
    for (int j = 1; j < k; j++) acc = (A)(acc + (A)Num<T>::load(src(j)[i]));
    if constexpr (is_float_v<T>)
      o[i] = Num<T>::store(acc);
    else
      o[i] = (T)acc;
  }
}

template <typename T>
rf_status *add_n_launch(rf__kernel_ctx *ctx, rf_tensor *out) {
  int k = ctx->num_inputs;
  int64_t n = out->num_elements;
  unsigned g = grid(ctx, n);
  if (k <= kInlinePtrs) {
    InlinePtrs<T> p = {};
    for (int j = 0; j < k; j++) p.p[j] = (const T *)ctx->inputs[j]->data;
    add_n_kernel<T><<<g, kThreads, 0, stream(ctx)>>>(p, k, n, (T *)out->data);
    RF_GPU_LAUNCHED(ctx);
    return NULL;
  }
  /* Many inputs: their pointers in a device array, filled on the stream
   * from launch parameters (see the top of the file). */
  int64_t dims[1] = {k};
  rf_shape s = rf_shape_make(1, dims);
  rf_tensor *arr = NULL;
  RF_CHECK(new_tensor(ctx, RF_INT64, &s, &arr));
  const void **dev = (const void **)arr->data;
  cudaError_t err = cudaSuccess;
  for (int j0 = 0; j0 < k && err == cudaSuccess; j0 += kInlinePtrs) {
    PtrChunk c = {};
    c.n = k - j0 < kInlinePtrs ? k - j0 : kInlinePtrs;
    for (int j = 0; j < c.n; j++) c.p[j] = ctx->inputs[j0 + j]->data;
    put_ptrs_kernel<<<1, kInlinePtrs, 0, stream(ctx)>>>(c, dev + j0);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    DevicePtrs<T> p = {(const T *const *)arr->data};
    add_n_kernel<T><<<g, kThreads, 0, stream(ctx)>>>(p, k, n, (T *)out->data);
    err = cudaGetLastError();
  }
  rf_tensor_release(arr); /* stream-ordered: reused only after the kernel */
  return err == cudaSuccess
             ? NULL
             : error(ctx, err, "AddN launch", __FILE__, __LINE__);
}

rf_status *add_n_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf_tensor *const *in = ctx->inputs;
  bool done;
  RF_CHECK(rf__add_n_prepare(ctx, &done));
  if (done) return NULL;
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, in[0]->dtype, &in[0]->shape, &out));
  if (out->num_elements == 0) return NULL;
  rf_status *st = visit_numeric(in[0]->dtype, [&](auto tag) {
    return add_n_launch<typename decltype(tag)::type>(ctx, out);
  });
  if (st) rf__kernel_drop_outputs(ctx); /* nothing half-written leaves */
  return st;
}

const rf__kernel_def defs[] = {RF_NARY_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_nary_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
