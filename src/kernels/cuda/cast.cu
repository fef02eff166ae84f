/* kernels/cuda/cast.cu - Cast between any two of the numeric and bool dtypes
 * on GPU devices, with the CPU kernel's rules (kernels/cpu/cast.c), so both
 * give the same bits:
 *  - float -> integer truncates toward zero and saturates; NaN gives 0;
 *  - integer -> integer wraps (two's complement);
 *  - anything -> bool is x != 0 (NaN is true); bool -> anything is 0 or 1;
 *  - to float16/bfloat16 rounds to nearest even from the exact value.
 * Loads give float (16/32-bit floats, exact), double or int64_t; each
 * destination has one store per load type. Kernels are instantiated per
 * (source, destination) dtype pair. */
#include "kernels/cuda/math_kernels.cuh"

namespace rf_gpu {
namespace {

/* ---- storage and loads per dtype ---- */

template <int D>
struct Dt;
#define RF_DT(E, S, L, LOAD)                                       \
  template <>                                                      \
  struct Dt<E> {                                                   \
    using S_t = S;                                                 \
    static __device__ __forceinline__ L load(S x) { return LOAD; } \
  };
RF_DT(RF_FLOAT16, __half, float, __half2float(x))
RF_DT(RF_BFLOAT16, __nv_bfloat16, float, __bfloat162float(x))
RF_DT(RF_FLOAT32, float, float, x)
RF_DT(RF_FLOAT64, double, double, x)
RF_DT(RF_INT8, int8_t, int64_t, (int64_t)x)
RF_DT(RF_UINT8, uint8_t, int64_t, (int64_t)x)
RF_DT(RF_INT32, int32_t, int64_t, (int64_t)x)
RF_DT(RF_INT64, int64_t, int64_t, x)
RF_DT(RF_BOOL, uint8_t, int64_t, (int64_t)(x != 0))
#undef RF_DT

/* ---- stores: one per (destination, load type) ---- */

/* |v| rounded to `bits` significant bits, nearest even, as an exact double
 * (v > 0). */
__device__ double round_u64(uint64_t v, int bits) {
  int top = 63 - __clzll((long long)v);
  if (top < bits) return (double)v;
  int shift = top + 1 - bits;
  uint64_t q = v >> shift, rest = v & ((1ull << shift) - 1);
  uint64_t half = 1ull << (shift - 1);
  if (rest > half || (rest == half && (q & 1))) q++;
  return ldexp((double)q, shift);
}

/* Saturating truncation from double; lo and hi are exact in double. */
template <typename T>
__device__ __forceinline__ T sat(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return (T)lo;
  if (v >= hi) return (T)hi;
  return (T)v;
}

template <int D>
struct To;
template <>
struct To<RF_FLOAT16> {
  static __device__ __half from(float v) { return __float2half_rn(v); }
  static __device__ __half from(double v) { return __double2half(v); }
  /* |v| >= 2^24 overflows float16 whichever way it rounds. */
  static __device__ __half from(int64_t v) { return __float2half_rn((float)v); }
};
template <>
struct To<RF_BFLOAT16> {
  static __device__ __nv_bfloat16 from(float v) {
    return __float2bfloat16_rn(v);
  }
  static __device__ __nv_bfloat16 from(double v) {
    return __double2bfloat16(v);
  }
  static __device__ __nv_bfloat16 from(int64_t v) {
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (m < (1ull << 24)) return __float2bfloat16_rn((float)v);
    double r = round_u64(m, 8); /* exact in float: one rounding in all */
    return __float2bfloat16_rn((float)(v < 0 ? -r : r));
  }
};
template <>
struct To<RF_FLOAT32> {
  static __device__ float from(float v) { return v; }
  static __device__ float from(double v) { return (float)v; }
  static __device__ float from(int64_t v) { return (float)v; }
};
template <>
struct To<RF_FLOAT64> {
  static __device__ double from(float v) { return v; }
  static __device__ double from(double v) { return v; }
  static __device__ double from(int64_t v) { return (double)v; }
};
#define RF_TO_INT(E, T, LO, HI)                                      \
  template <>                                                        \
  struct To<E> {                                                     \
    static __device__ T from(double v) { return sat<T>(v, LO, HI); } \
    static __device__ T from(float v) { return from((double)v); }    \
    static __device__ T from(int64_t v) {                            \
      return (T)(typename Unsigned<T>::type)(uint64_t)v;             \
    }                                                                \
  };
RF_TO_INT(RF_INT8, int8_t, -128.0, 127.0)
RF_TO_INT(RF_UINT8, uint8_t, 0.0, 255.0)
RF_TO_INT(RF_INT32, int32_t, -2147483648.0, 2147483647.0)
#undef RF_TO_INT
template <>
struct To<RF_INT64> {
  /* INT64_MAX is not a double: anything >= 2^63 saturates. */
  static __device__ int64_t from(double v) {
    if (v != v) return 0;
    if (v <= -0x1p63) return INT64_MIN;
    if (v >= 0x1p63) return INT64_MAX;
    return (int64_t)v;
  }
  static __device__ int64_t from(float v) { return from((double)v); }
  static __device__ int64_t from(int64_t v) { return v; }
};
template <>
struct To<RF_BOOL> {
  static __device__ uint8_t from(float v) { return v != 0; }
  static __device__ uint8_t from(double v) { return v != 0; }
  static __device__ uint8_t from(int64_t v) { return v != 0; }
};

template <int S, int D>
__global__ void cast_kernel(const typename Dt<S>::S_t *x,
                            typename Dt<D>::S_t *y, int64_t n) {
  RF_GPU_LOOP(i, n) y[i] = To<D>::from(Dt<S>::load(x[i]));
}

template <int S, int D>
rf_status *cast_launch(rf__kernel_ctx *ctx, const rf_tensor *x, rf_tensor *y) {
  using SS = typename Dt<S>::S_t;
  using DS = typename Dt<D>::S_t;
  int64_t n = x->num_elements;
  cast_kernel<S, D><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
      (const SS *)x->data, (DS *)y->data, n);
  RF_GPU_LAUNCHED(ctx);
  return NULL;
}

/* Calls f(std::integral_constant<int, dtype>) for a castable dtype. */
template <typename F>
rf_status *visit_castable(rf_dtype dt, F &&f) {
  switch (dt) {
    case RF_FLOAT16: return f(std::integral_constant<int, RF_FLOAT16>{});
    case RF_BFLOAT16: return f(std::integral_constant<int, RF_BFLOAT16>{});
    case RF_FLOAT32: return f(std::integral_constant<int, RF_FLOAT32>{});
    case RF_FLOAT64: return f(std::integral_constant<int, RF_FLOAT64>{});
    case RF_INT8: return f(std::integral_constant<int, RF_INT8>{});
    case RF_UINT8: return f(std::integral_constant<int, RF_UINT8>{});
    case RF_INT32: return f(std::integral_constant<int, RF_INT32>{});
    case RF_INT64: return f(std::integral_constant<int, RF_INT64>{});
    default: return f(std::integral_constant<int, RF_BOOL>{});
  }
}

bool castable(rf_dtype d) { return is_numeric(d) || d == RF_BOOL; }

rf_status *cast_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0];
  rf_dtype to = ctx->node->out_dtypes[0];
  if (x->dtype == to) {
    rf__kernel_forward_input(ctx, 0, 0);
    return NULL;
  }
  if (!castable(x->dtype) || !castable(to))
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED, "no Cast from %s to %s",
                            rf_dtype_name(x->dtype), rf_dtype_name(to));
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, to, &x->shape, &y));
  if (x->num_elements == 0) return NULL;
  return visit_castable(x->dtype, [&](auto s) {
    return visit_castable(to, [&](auto d) {
      return cast_launch<decltype(s)::value, decltype(d)::value>(ctx, x, y);
    });
  });
}

const rf__kernel_def cast_kernel_def = {
    .op = "Cast", .device_type = RF_DEVICE_GPU, .compute = cast_compute};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_cast_kernels(void) {
  return rf__kernel_register(&rf_gpu::cast_kernel_def);
}
