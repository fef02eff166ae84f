/* kernels/cuda/elementwise_binary.cu - Add, Sub, Mul, Div, Equal and the
 * internal _BroadcastToShapeOf on GPU devices, with numpy broadcasting
 * (broadcast.cuh). Same arithmetic as the CPU kernels: integers in the
 * unsigned type of their width (wrapping), float16/bfloat16 in float rounded
 * once, integer division truncating with x / -1 as wrapping negation.
 *
 * One difference, as in TensorFlow: integer division by zero is not an error
 * on the GPU (finding it would need a device-to-host copy and a wait on every
 * Div); the quotient is unspecified - currently all bits set. */
#include "kernels/cuda/broadcast.cuh"
#include "kernels/cuda/math_kernels.cuh"
#include "kernels/math_prepare.h"

namespace rf_gpu {
namespace {

template <typename T>
__device__ __forceinline__ T wrap_add(T x, T y) {
  using U = typename Unsigned<T>::type;
  return (T)(U)((U)x + (U)y);
}

struct AddF {
  template <typename T>
  __device__ T operator()(T x, T y) const {
    if constexpr (is_float_v<T>)
      return Num<T>::store(Num<T>::load(x) + Num<T>::load(y));
    else
      return wrap_add(x, y);
  }
};

struct SubF {
  template <typename T>
  __device__ T operator()(T x, T y) const {
    using U = typename Unsigned<T>::type;
    if constexpr (is_float_v<T>)
      return Num<T>::store(Num<T>::load(x) - Num<T>::load(y));
    else
      return (T)(U)((U)x - (U)y);
  }
};

struct MulF {
  template <typename T>
  __device__ T operator()(T x, T y) const {
    using U = typename Unsigned<T>::type;
    if constexpr (is_float_v<T>)
      return Num<T>::store(Num<T>::load(x) * Num<T>::load(y));
    else
      return (T)(U)((U)x * (U)y);
  }
};

struct DivF {
  template <typename T>
  __device__ T operator()(T x, T y) const {
    using U = typename Unsigned<T>::type;
    if constexpr (is_float_v<T>) {
      return Num<T>::store(Num<T>::load(x) / Num<T>::load(y));
    } else if constexpr (std::is_signed<T>::value) {
      if (y == 0) return (T)-1; /* unspecified (see the file comment) */
      if (y == -1) return (T)(U)((U)0 - (U)x); /* INT_MIN / -1 wraps */
      return (T)(x / y);
    } else {
      if (y == 0) return (T) ~(T)0;
      return (T)(x / y);
    }
  }
};

struct EqualF {
  template <typename T>
  __device__ uint8_t operator()(T x, T y) const {
    if constexpr (is_float_v<T>)
      return Num<T>::load(x) == Num<T>::load(y);
    else
      return x == y;
  }
};

/* bool operands: any non-zero byte is true. */
struct EqualBoolF {
  __device__ uint8_t operator()(uint8_t x, uint8_t y) const {
    return (x != 0) == (y != 0);
  }
};

struct FirstF {
  template <typename T>
  __device__ T operator()(T x, T) const {
    return x;
  }
};

enum Op { ADD, SUB, MUL, DIV, EQUAL };
const char *const op_names[] = {"Add", "Sub", "Mul", "Div", "Equal"};

template <typename T>
rf_status *launch_op(rf__kernel_ctx *ctx, Op op, const rf_tensor *a,
                     const rf_tensor *b, rf_tensor *o) {
  switch (op) {
    case ADD: return broadcast_launch<T, T, T>(ctx, a, b, o, AddF{});
    case SUB: return broadcast_launch<T, T, T>(ctx, a, b, o, SubF{});
    case MUL: return broadcast_launch<T, T, T>(ctx, a, b, o, MulF{});
    case DIV: return broadcast_launch<T, T, T>(ctx, a, b, o, DivF{});
    default: return broadcast_launch<T, T, uint8_t>(ctx, a, b, o, EqualF{});
  }
}

rf_status *binary_compute(rf__kernel_ctx *ctx, Op op) {
  RF_CHECK(begin(ctx));
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  rf_shape os;
  RF_CHECK(rf__binary_prepare(ctx, op_names[op], op == EQUAL, &os));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, op == EQUAL ? RF_BOOL : a->dtype, &os, &out));
  if (a->dtype == RF_BOOL)
    return broadcast_launch<uint8_t, uint8_t, uint8_t>(ctx, a, b, out,
                                                       EqualBoolF{});
  return visit_numeric(a->dtype, [&](auto tag) {
    return launch_op<typename decltype(tag)::type>(ctx, op, a, b, out);
  });
}

rf_status *add_compute(rf__kernel_ctx *c) { return binary_compute(c, ADD); }
rf_status *sub_compute(rf__kernel_ctx *c) { return binary_compute(c, SUB); }
rf_status *mul_compute(rf__kernel_ctx *c) { return binary_compute(c, MUL); }
rf_status *div_compute(rf__kernel_ctx *c) { return binary_compute(c, DIV); }
rf_status *equal_compute(rf__kernel_ctx *c) { return binary_compute(c, EQUAL); }

/* _BroadcastToShapeOf(x, like): x copied out to like's shape. */
rf_status *broadcast_to_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0];
  rf_shape os;
  bool done;
  RF_CHECK(rf__broadcast_to_prepare(ctx, &os, &done));
  if (done) return NULL;
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &os, &out));
  /* Only x is read: like's values are not needed (b is x again, unused). */
  return visit_bits(rf_dtype_size(x->dtype), [&](auto tag) {
    using U = typename decltype(tag)::type;
    return broadcast_launch<U, U, U>(ctx, x, x, out, FirstF{});
  });
}

const rf__kernel_def defs[] = {RF_BINARY_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_binary_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
