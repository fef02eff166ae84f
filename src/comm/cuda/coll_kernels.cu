/* comm/cuda/coll_kernels.cu - reduction and gather kernels of the virtual-GPU
 * collective backend. Arithmetic mirrors comm/cpu/reduce_kernels.c exactly so
 * GPU and CPU results are bit-identical: inputs combined in rank order with
 * explicitly rounded operations (no FMA contraction), NaN-propagating min/max
 * written as the CPU's macros, wrapping integer sums/products through the
 * unsigned type, float16/bfloat16 accumulated in float and rounded once by
 * the CPU's own conversion rules (NaN payloads included), avg as the CPU does
 * it (float/double: divide the sum; 16-bit: multiply by 1/n; integers:
 * truncating division). Pointer tables travel as a __grid_constant__
 * parameter (no per-thread copy). */
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "comm/cuda/coll_kernels.h" /* extern "C" inside */
#include "core/cuda_check.h"        /* likewise; C++ overloads in cuBLAS */

namespace {

constexpr int kThreads = 256;
/* rf_reduction's values (comm/collective.h; checked in comm/cuda/backend.c) */
enum { kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4 };

/* ---- 16-bit floats: the CPU's conversions (core/dtype.c), bit for bit ---- */

__device__ __forceinline__ float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    float v = __fmul_rn((float)man, 1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

__device__ __forceinline__ uint16_t float_to_half(float f) {
  uint32_t u = __float_as_uint(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t au = u & 0x7fffffffu;
  if (au >= 0x7f800000u) return sign | 0x7c00 | (au > 0x7f800000u ? 0x200 : 0);
  if (au >= 0x477ff000u) return sign | 0x7c00;
  if (au < 0x38800000u) {
    float v = __fmul_rn(__uint_as_float(au), 16777216.0f);
    uint32_t m = (uint32_t)v;
    float r = __fsub_rn(v, (float)m);
    if (r > 0.5f || (r == 0.5f && (m & 1))) m++;
    return sign | (uint16_t)m;
  }
  uint32_t man = au & 0x7fffff, exp = (au >> 23) - 112;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return sign | (uint16_t)h;
}

__device__ __forceinline__ float bf16_to_float(uint16_t b) {
  return __uint_as_float((uint32_t)b << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* ---- element traits: storage T, accumulator A ---- */

template <typename S, typename U>
struct IntTraits { /* wrapping through the unsigned type U */
  typedef S T;
  typedef S A;
  static __device__ __forceinline__ A load(T x) { return x; }
  static __device__ __forceinline__ T store(A a) { return a; }
  static __device__ __forceinline__ A add(A a, A b) {
    return (T)(U)((U)a + (U)b);
  }
  static __device__ __forceinline__ A mul(A a, A b) {
    return (T)(U)((U)a * (U)b);
  }
  /* avg: C's truncating division after the usual promotions (int8/uint8
   * promote to int, as on the CPU) */
  static __device__ __forceinline__ T finish_avg(A a, int n) {
    return n == 1 ? a : (T)(a / (decltype(a + 0))n);
  }
};

struct F32Traits {
  typedef float T;
  typedef float A;
  static __device__ __forceinline__ A load(T x) { return x; }
  static __device__ __forceinline__ T store(A a) { return a; }
  static __device__ __forceinline__ A add(A a, A b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ A mul(A a, A b) { return __fmul_rn(a, b); }
  static __device__ __forceinline__ T finish_avg(A a, int n) {
    return n == 1 ? a : __fdiv_rn(a, (float)n);
  }
};

struct F64Traits {
  typedef double T;
  typedef double A;
  static __device__ __forceinline__ A load(T x) { return x; }
  static __device__ __forceinline__ T store(A a) { return a; }
  static __device__ __forceinline__ A add(A a, A b) { return __dadd_rn(a, b); }
  static __device__ __forceinline__ A mul(A a, A b) { return __dmul_rn(a, b); }
  static __device__ __forceinline__ T finish_avg(A a, int n) {
    return n == 1 ? a : __ddiv_rn(a, (double)n);
  }
};

template <bool kBf16>
struct F16Traits {
  typedef uint16_t T;
  typedef float A;
  static __device__ __forceinline__ A load(T x) {
    return kBf16 ? bf16_to_float(x) : half_to_float(x);
  }
  static __device__ __forceinline__ T store(A a) {
    return kBf16 ? float_to_bf16(a) : float_to_half(a);
  }
  static __device__ __forceinline__ A add(A a, A b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ A mul(A a, A b) { return __fmul_rn(a, b); }
  static __device__ __forceinline__ T finish_avg(A a, int n) {
    return store(__fmul_rn(a, __fdiv_rn(1.0f, (float)n)));
  }
};

template <typename Tr, int OP>
__device__ __forceinline__ typename Tr::A combine(typename Tr::A a,
                                                  typename Tr::A b) {
  /* the CPU's OP_MIN / OP_MAX: the later value wins on NaN */
  if constexpr (OP == kMin) return ((b) < (a) || (b) != (b)) ? b : a;
  if constexpr (OP == kMax) return ((b) > (a) || (b) != (b)) ? b : a;
  if constexpr (OP == kProd) return Tr::mul(a, b);
  return Tr::add(a, b); /* sum, avg */
}

/* The reduction of element i over the n inputs, in rank order. */
template <typename Tr, int OP>
__device__ __forceinline__ typename Tr::T reduce_at(const rf__cuda_coll_args &a,
                                                    int64_t i) {
  typedef typename Tr::T T;
  typename Tr::A acc = Tr::load(static_cast<const T *>(a.in[0])[i]);
  for (int k = 1; k < a.n; k++)
    acc = combine<Tr, OP>(acc, Tr::load(static_cast<const T *>(a.in[k])[i]));
  if constexpr (OP == kAvg) return Tr::finish_avg(acc, a.n);
  return Tr::store(acc);
}

template <typename Tr, int OP>
__global__ void __launch_bounds__(kThreads)
    reduce_kernel(const __grid_constant__ rf__cuda_coll_args a) {
  typedef typename Tr::T T;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count;
       i += stride) {
    T v = reduce_at<Tr, OP>(a, i);
    for (int j = 0; j < a.num_outs; j++) static_cast<T *>(a.out[j])[i] = v;
  }
}

template <typename Tr, int OP>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(const __grid_constant__ rf__cuda_coll_args a) {
  typedef typename Tr::T T;
  int64_t per = a.count / a.n, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count;
       i += stride) {
    int64_t r = i / per;
    static_cast<T *>(a.out[r])[i - r * per] = reduce_at<Tr, OP>(a, i);
  }
}

/* Copies of element-sized words W (1, 2, 4, 8 or 16 bytes). */
template <typename W>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const __grid_constant__ rf__cuda_coll_args a, int64_t words) {
  int64_t total = words * a.n, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    int64_t k = i / words;
    W v = static_cast<const W *>(a.in[k])[i - k * words];
    for (int j = 0; j < a.num_outs; j++) static_cast<W *>(a.out[j])[i] = v;
  }
}

int grid_for(int64_t items, int multiprocessors) {
  int64_t blocks = (items + kThreads - 1) / kThreads;
  int64_t cap = (int64_t)(multiprocessors > 0 ? multiprocessors : 16) * 8;
  if (blocks > cap) blocks = cap;
  return blocks < 1 ? 1 : (int)blocks;
}

template <typename Tr, int OP>
void launch_op(const rf__cuda_coll_args &a, cudaStream_t s, int mp) {
  int grid = grid_for(a.count, mp);
  if (a.mode == RF_CUDA_COLL_REDUCE_SCATTER)
    scatter_kernel<Tr, OP><<<grid, kThreads, 0, s>>>(a);
  else
    reduce_kernel<Tr, OP><<<grid, kThreads, 0, s>>>(a);
}

template <typename Tr>
bool launch_typed(const rf__cuda_coll_args &a, cudaStream_t s, int mp) {
  switch (a.op) {
    case kSum: launch_op<Tr, kSum>(a, s, mp); return true;
    case kProd: launch_op<Tr, kProd>(a, s, mp); return true;
    case kMin: launch_op<Tr, kMin>(a, s, mp); return true;
    case kMax: launch_op<Tr, kMax>(a, s, mp); return true;
    case kAvg: launch_op<Tr, kAvg>(a, s, mp); return true;
    default: return false;
  }
}

bool launch_reduce(const rf__cuda_coll_args &a, cudaStream_t s, int mp) {
  switch (a.dtype) {
    case RF_FLOAT16: return launch_typed<F16Traits<false>>(a, s, mp);
    case RF_BFLOAT16: return launch_typed<F16Traits<true>>(a, s, mp);
    case RF_FLOAT32: return launch_typed<F32Traits>(a, s, mp);
    case RF_FLOAT64: return launch_typed<F64Traits>(a, s, mp);
    case RF_INT8: return launch_typed<IntTraits<int8_t, uint8_t>>(a, s, mp);
    case RF_UINT8: return launch_typed<IntTraits<uint8_t, uint8_t>>(a, s, mp);
    case RF_INT32: return launch_typed<IntTraits<int32_t, uint32_t>>(a, s, mp);
    case RF_INT64: return launch_typed<IntTraits<int64_t, uint64_t>>(a, s, mp);
    default: return false;
  }
}

/* The widest word that divides every buffer's size and alignment. */
template <typename W>
void launch_gather_w(const rf__cuda_coll_args &a, int64_t bytes, cudaStream_t s,
                     int mp) {
  int64_t words = bytes / (int64_t)sizeof(W);
  gather_kernel<W><<<grid_for(words * a.n, mp), kThreads, 0, s>>>(a, words);
}

void launch_gather(const rf__cuda_coll_args &a, cudaStream_t s, int mp) {
  int64_t bytes = a.count * (int64_t)rf_dtype_size(a.dtype);
  uintptr_t bits = (uintptr_t)bytes;
  for (int k = 0; k < a.n; k++) bits |= (uintptr_t)a.in[k];
  for (int j = 0; j < a.num_outs; j++) bits |= (uintptr_t)a.out[j];
  if (bits % 16 == 0)
    launch_gather_w<uint4>(a, bytes, s, mp);
  else if (bits % 8 == 0)
    launch_gather_w<uint64_t>(a, bytes, s, mp);
  else if (bits % 4 == 0)
    launch_gather_w<uint32_t>(a, bytes, s, mp);
  else if (bits % 2 == 0)
    launch_gather_w<uint16_t>(a, bytes, s, mp);
  else
    launch_gather_w<uint8_t>(a, bytes, s, mp);
}

}  // namespace

extern "C" rf_status *rf__cuda_coll_launch(const rf__cuda_coll_args *a,
                                           void *stream, int multiprocessors) {
  if (a->n < 1 || a->n > RF_CUDA_COLL_MAX || a->num_outs < 0 ||
      a->num_outs > RF_CUDA_COLL_MAX)
    return rf_status_new(RF_INTERNAL,
                         "collective kernel: %d inputs, %d outputs", a->n,
                         a->num_outs);
  if (a->count <= 0 || a->num_outs == 0) return NULL;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  (void)cudaGetLastError(); /* only this launch's error below */
  if (a->mode == RF_CUDA_COLL_GATHER) {
    launch_gather(*a, s, multiprocessors);
  } else if (!launch_reduce(*a, s, multiprocessors)) {
    return rf_status_new(RF_UNIMPLEMENTED, "reduction %d of %s on GPU devices",
                         a->op, rf_dtype_name(a->dtype));
  }
  return RF_CUDA_STATUS(cudaGetLastError());
}
