/* kernels/cuda/gpu_common.cuh - what every CUDA kernel file shares: the C
 * headers seen from C++, launch geometry (256-thread blocks, grid-stride
 * loops, grids sized from the multiprocessor count), checked launches, dtype
 * dispatch and the float16/bfloat16 conversions (computed in float, rounded
 * to nearest even once, as on the CPU).
 *
 * Execution model (docs/GPU_KERNELS.md): a kernel makes its device current,
 * enqueues its work on ctx->device->stream and returns; the executor treats
 * it as synchronous. Nothing here waits for the GPU. */
#ifndef RF_KERNELS_CUDA_GPU_COMMON_CUH
#define RF_KERNELS_CUDA_GPU_COMMON_CUH

#include <cublas_v2.h> /* before extern "C": it has C++ overloads */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#ifdef RF_HAVE_NCCL
#include <nccl.h>
#endif

#include <atomic>
#include <cstdint>
#include <mutex>
#include <type_traits>

/* core/tensor.h declares its count as a C11 atomic_int; C++ sees the same
 * object as std::atomic<int> (GCC gives both one layout; C++ has no
 * <stdatomic.h> before C++23). */
using std::atomic_int;
using std::atomic_load_explicit;
using std::memory_order_acquire;
static_assert(sizeof(std::atomic<int>) == sizeof(int) &&
                  alignof(std::atomic<int>) == alignof(int),
              "atomic_int layout");

extern "C" {
#include "core/cuda_check.h"
#include "core/status.h"
#include "kernels/kernel.h"
#include "device/device.h"
#include "device/gpu/gpu.h"
}

namespace rf_gpu {

constexpr int kThreads = 256; /* every launch's block size */

/* ---- errors ---- */

/* The status for a failed CUDA call, naming the node, op and device as well
 * as the call, file and line (the translation is rf__cuda_status). */
rf_status *error(const rf__kernel_ctx *ctx, cudaError_t err, const char *expr,
                 const char *file, int line);

}  // namespace rf_gpu

/* Returns from the enclosing kernel function when expr is not cudaSuccess. */
#define RF_GPU_CHECK(ctx, expr)                                             \
  do {                                                                      \
    cudaError_t rf__gpu_err_ = (expr);                                      \
    if (rf__gpu_err_ != cudaSuccess)                                        \
      return rf_gpu::error((ctx), rf__gpu_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/* After every <<<...>>> launch. */
#define RF_GPU_LAUNCHED(ctx) RF_GPU_CHECK(ctx, cudaGetLastError())

/* Grid-stride loop over [0, n) with 64-bit indices. */
#define RF_GPU_LOOP(i, n)                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; \
       i < (int64_t)(n); i += (int64_t)blockDim.x * gridDim.x)

namespace rf_gpu {

/* ---- the device and its stream ---- */

/* The only way a kernel reaches its stream and cuBLAS handle: the first
 * call counts an enqueue on the device (rf__gpu_kernel_stream; without it
 * a collective could skip waiting for this kernel: device/gpu/order.h). */
inline cudaStream_t stream(rf__kernel_ctx *ctx) {
  return (cudaStream_t)rf__gpu_kernel_stream(ctx);
}
inline cublasHandle_t blas(rf__kernel_ctx *ctx) {
  (void)rf__gpu_kernel_stream(ctx);
  return (cublasHandle_t)ctx->device->blas;
}
/* The lock of a cuBLAS handle: cuBLAS allows no two threads in one handle
 * at once, and two kernels of one device may run at once on different
 * executor threads. Every call on a device's handle (cuBLAS, and cuBLASLt
 * through the same handle cast) holds it; handles map onto a fixed set of
 * locks (a shared lock only costs waiting). */
std::mutex &blas_lock(const void *handle);

/* The cuBLAS compute type of a float32 product on ctx's device: TF32 tensor
 * cores when its session allows them (rf_session_options.allow_tf32),
 * plain float32 otherwise. */
inline cublasComputeType_t gemm_compute_32f(const rf__kernel_ctx *ctx) {
  return ctx->device && ctx->device->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                : CUBLAS_COMPUTE_32F;
}

/* Every kernel calls it first: INTERNAL when the context has no GPU device;
 * clears a stale CUDA error of this thread. (The executor has already made
 * the device's GPU current: rf__device.enter.) */
rf_status *begin(const rf__kernel_ctx *ctx);

/* Blocks for n items: one item a thread, at most what the device's share
 * of the GPU keeps resident (8 blocks of 256 per multiprocessor of
 * rf__device.gpu_sms); at least 1. */
unsigned grid(const rf__kernel_ctx *ctx, int64_t n);
/* The SM count a library's heuristic should target for ctx's device: its
 * share of the GPU (rf__device.gpu_sms), or 0 when that is the whole GPU. */
int sm_count_target(const rf__kernel_ctx *ctx);

/* ---- memory ---- */

/* rf__kernel_alloc_output: device memory (on_gpu) from the device's caching
 * allocator, or host memory for an output the kernel declares host memory. */
rf_status *alloc_output(rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                        const rf_shape *shape, rf_tensor **out);
/* A device tensor that is no output (scratch, a variable's copy). Releasing
 * it right after enqueueing its last use is safe: the allocator hands a
 * block only to later work on the same stream. */
rf_status *new_tensor(rf__kernel_ctx *ctx, rf_dtype dtype,
                      const rf_shape *shape, rf_tensor **out);

/* ---- element types ---- */

/* Num<T>: C is the type T computes in; load/store convert. */
template <typename T>
struct Num {
  using C = T;
  static __host__ __device__ __forceinline__ C load(T x) { return x; }
  static __host__ __device__ __forceinline__ T store(C v) { return v; }
};
template <>
struct Num<__half> {
  using C = float;
  static __host__ __device__ __forceinline__ float load(__half x) {
    return __half2float(x);
  }
  static __host__ __device__ __forceinline__ __half store(float v) {
    return __float2half_rn(v);
  }
};
template <>
struct Num<__nv_bfloat16> {
  using C = float;
  static __host__ __device__ __forceinline__ float load(__nv_bfloat16 x) {
    return __bfloat162float(x);
  }
  static __host__ __device__ __forceinline__ __nv_bfloat16 store(float v) {
    return __float2bfloat16_rn(v);
  }
};

/* Unsigned type of the same width: integer arithmetic wraps there. */
template <typename T>
struct Unsigned {
  using type = T;
};
template <>
struct Unsigned<int8_t> {
  using type = uint8_t;
};
template <>
struct Unsigned<int32_t> {
  using type = uint32_t;
};
template <>
struct Unsigned<int64_t> {
  using type = uint64_t;
};

template <typename T>
struct Tag {
  using type = T;
};

template <typename T>
constexpr bool is_float_v =
    std::is_floating_point<T>::value || std::is_same<T, __half>::value ||
    std::is_same<T, __nv_bfloat16>::value;

/* Calls f(Tag<T>{}) for the storage type T of a float dtype. */
template <typename F>
rf_status *visit_float(rf_dtype dt, F &&f) {
  switch (dt) {
    case RF_FLOAT16: return f(Tag<__half>{});
    case RF_BFLOAT16: return f(Tag<__nv_bfloat16>{});
    case RF_FLOAT32: return f(Tag<float>{});
    default: return f(Tag<double>{});
  }
}

/* Same for the numeric dtypes (floats and int8, uint8, int32, int64). */
template <typename F>
rf_status *visit_numeric(rf_dtype dt, F &&f) {
  switch (dt) {
    case RF_INT8: return f(Tag<int8_t>{});
    case RF_UINT8: return f(Tag<uint8_t>{});
    case RF_INT32: return f(Tag<int32_t>{});
    case RF_INT64: return f(Tag<int64_t>{});
    default: return visit_float(dt, f);
  }
}

/* Same by element size only (copies and fills): uint8/16/32/64. */
template <typename F>
rf_status *visit_bits(size_t size, F &&f) {
  switch (size) {
    case 1: return f(Tag<uint8_t>{});
    case 2: return f(Tag<uint16_t>{});
    case 4: return f(Tag<uint32_t>{});
    default: return f(Tag<uint64_t>{});
  }
}

inline bool is_numeric(rf_dtype d) {
  return rf_dtype_is_float(d) || rf_dtype_is_integer(d);
}

/* Fills dst[0, n) with one element `bits` (the value's bytes, low first). */
rf_status *fill_bits(rf__kernel_ctx *ctx, void *dst, size_t esize, int64_t n,
                     uint64_t bits);

}  // namespace rf_gpu

#endif
