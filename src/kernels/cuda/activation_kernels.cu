/* kernels/cuda/activation_kernels.cu - GPU kernels of the elementwise
 * activations Relu, Sigmoid, Tanh and their gradients _ReluGrad(dy, x),
 * _SigmoidGrad(y, dy), _TanhGrad(y, dy), with the CPU kernels' formulas
 * (kernels/cpu/activation_kernels.c): float16/bfloat16 compute in float,
 * float64 in double, integers (Relu only) as themselves. Relu passes NaN
 * through, as max(x, 0) does in TensorFlow. Accurate expf/tanhf, never the
 * fast intrinsics, so results match the CPU to float tolerance. */
#include "kernels/cuda/nn_kernels.cuh"
#include "kernels/nn_prepare.h"

namespace rf_gpu {
namespace {

template <typename C>
__device__ __forceinline__ C tanh_c(C v) {
  if constexpr (std::is_same<C, double>::value)
    return tanh(v);
  else
    return tanhf(v);
}

/* Functors on compute-type values; a: first input, b: second. */
struct ReluF {
  template <typename C>
  __device__ C operator()(C x, C) const {
    return x < 0 ? (C)0 : x;
  }
};
struct ReluGradF { /* (dy, x) */
  template <typename C>
  __device__ C operator()(C dy, C x) const {
    return x > 0 ? dy : (C)0;
  }
};
struct SigmoidF {
  template <typename C>
  __device__ C operator()(C x, C) const {
    return (C)1 / ((C)1 + exp_c(-x));
  }
};
struct TanhF {
  template <typename C>
  __device__ C operator()(C x, C) const {
    return tanh_c(x);
  }
};
struct SigmoidGradF { /* (y, dy) */
  template <typename C>
  __device__ C operator()(C y, C dy) const {
    return dy * y * ((C)1 - y);
  }
};
struct TanhGradF { /* (y, dy) */
  template <typename C>
  __device__ C operator()(C y, C dy) const {
    return dy * ((C)1 - y * y);
  }
};

/* out[i] = f(a[i], b[i]); b == a for unary ops. */
template <typename T, typename F>
__global__ void ew_kernel(const T *a, const T *b, T *out, int64_t n, F f) {
  RF_GPU_LOOP(i, n) {
    out[i] = Num<T>::store(f(Num<T>::load(a[i]), Num<T>::load(b[i])));
  }
}

/* INTS: int8, int32 and int64 are accepted too (Relu, _ReluGrad); other
 * ops have kernels for the float dtypes only. */
template <bool INTS, typename F>
rf_status *elementwise(rf__kernel_ctx *ctx, F f) {
  RF_CHECK(begin(ctx));
  const rf_tensor *a = ctx->inputs[0];
  const rf_tensor *b = ctx->num_inputs > 1 ? ctx->inputs[1] : NULL;
  RF_CHECK(rf__activation_prepare(ctx, INTS, "GPU"));
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, a->dtype, &a->shape, &out));
  int64_t n = a->num_elements;
  if (n == 0) return NULL;
  const void *bd = b ? b->data : a->data;
  return visit_numeric(a->dtype, [&](auto tag) -> rf_status * {
    using T = typename decltype(tag)::type;
    /* Kernels only for the dtypes rf__activation_prepare admits. */
    if constexpr (is_float_v<T> ||
                  (INTS && (std::is_same<T, int8_t>::value ||
                            std::is_same<T, int32_t>::value ||
                            std::is_same<T, int64_t>::value))) {
      ew_kernel<T, F><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
          (const T *)a->data, (const T *)bd, (T *)out->data, n, f);
      RF_GPU_LAUNCHED(ctx);
    }
    return NULL;
  });
}

rf_status *relu_compute(rf__kernel_ctx *c) {
  return elementwise<true>(c, ReluF{});
}
rf_status *relu_grad_compute(rf__kernel_ctx *c) {
  return elementwise<true>(c, ReluGradF{});
}
rf_status *sigmoid_compute(rf__kernel_ctx *c) {
  return elementwise<false>(c, SigmoidF{});
}
rf_status *tanh_compute(rf__kernel_ctx *c) {
  return elementwise<false>(c, TanhF{});
}
rf_status *sigmoid_grad_compute(rf__kernel_ctx *c) {
  return elementwise<false>(c, SigmoidGradF{});
}
rf_status *tanh_grad_compute(rf__kernel_ctx *c) {
  return elementwise<false>(c, TanhGradF{});
}

const rf__kernel_def defs[] = {RF_ACTIVATION_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_activation_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
