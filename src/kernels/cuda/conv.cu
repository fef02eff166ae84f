/* kernels/cuda/conv.cu - Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter
 * on the GPU (NHWC, filter HWIO or OHWI). In builds with cuDNN (RF_WITH_CUDNN)
 * float32, float16 and bfloat16 go through cuDNN (conv_dnn.cu) whenever its
 * symmetric padding can express the op's (dnn_conv_fits). Everything else
 * (float64, TensorFlow's asymmetric SAME padding, empty tensors, builds
 * without cuDNN) runs the direct kernels here: a thread per output element
 * for the forward pass, a thread per input element gathering from the
 * outputs its windows reach for the input gradient, and a block per filter
 * element summing over every output position for the filter gradient (a
 * fixed tree in shared memory). Nothing is added atomically, so results are
 * the same from run to run. float16/bfloat16 sum in float (Num<T>).
 * _FusedConv2DBiasRelu (passes/fuse_epilogues.c) is one
 * cudnnConvolutionBiasActivationForward for float32 where cuDNN takes the
 * convolution, else Conv2D, BiasAdd and Relu nested (kernels/fused_conv.h). */
#include "kernels/cuda/gpu_common.cuh"

#ifdef RF_HAVE_CUDNN
#include "kernels/cuda/conv_dnn.cuh"
#include "kernels/cuda/window.cuh"
#endif

extern "C" {
#include "kernels/conv_prepare.h"
#include "kernels/fused_conv.h"
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

using G = rf__conv_geom;

/* Element strides of a filter's (kh, kw, c, oc) axes in its layout. */
struct FilterStrides {
  int64_t i, j, k, o;
};

__host__ __device__ FilterStrides filter_strides(const G &g) {
  if (g.ohwi) return {g.kw * g.c, g.c, 1, g.kh * g.kw * g.c};
  return {g.kw * g.c * g.oc, g.c * g.oc, g.oc, 1};
}

/* y (n, oh, ow, oc) = sum over the window and channels of x * f. */
template <typename T>
__global__ void conv_forward(G g, const T *x, const T *f, T *y, int64_t n) {
  RF_GPU_LOOP(e, n) {
    int64_t b, oh, ow, o;
    split4<int64_t>(e, g.oh, g.ow, g.oc, &b, &oh, &ow, &o);
    FilterStrides fs = filter_strides(g);
    typename Num<T>::C s = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t ih = oh * g.sh - g.pt + i * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t iw = ow * g.sw - g.pl + j * g.dw;
        if (iw < 0 || iw >= g.w) continue;
        const T *xp = x + ((b * g.h + ih) * g.w + iw) * g.c;
        const T *fp = f + i * fs.i + j * fs.j + o * fs.o;
        for (int64_t k = 0; k < g.c; k++)
          s += Num<T>::load(xp[k]) * Num<T>::load(fp[k * fs.k]);
      }
    }
    y[e] = Num<T>::store(s);
  }
}

/* dx (n, h, w, c): for each window position (i, j) that puts this input
 * element under an output (oh, ow), sum dy[oh, ow, :] f[i, j, c, :]. */
template <typename T>
__global__ void conv_input_grad(G g, const T *f, const T *dy, T *dx,
                                int64_t n) {
  RF_GPU_LOOP(e, n) {
    int64_t b, ih, iw, k;
    split4<int64_t>(e, g.h, g.w, g.c, &b, &ih, &iw, &k);
    FilterStrides fs = filter_strides(g);
    typename Num<T>::C s = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t th = ih + g.pt - i * g.dh;
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.oh) continue;
      int64_t oh = th / g.sh;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t tw = iw + g.pl - j * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.ow) continue;
        int64_t ow = tw / g.sw;
        const T *d = dy + ((b * g.oh + oh) * g.ow + ow) * g.oc;
        const T *fp = f + i * fs.i + j * fs.j + k * fs.k;
        for (int64_t o = 0; o < g.oc; o++)
          s += Num<T>::load(d[o]) * Num<T>::load(fp[o * fs.o]);
      }
    }
    dx[e] = Num<T>::store(s);
  }
}

/* dw: block e, the filter element (i, j, k, o) in HWIO order, sums x * dy
 * over every (n, oh, ow) into its place in the filter's layout. */
template <typename T>
__global__ void conv_filter_grad(G g, const T *x, const T *dy, T *dw,
                                 int64_t n) {
  using C = typename Num<T>::C;
  __shared__ C part[kThreads];
  int64_t positions = g.n * g.oh * g.ow;
  for (int64_t e = blockIdx.x; e < n; e += gridDim.x) {
    int64_t i, j, k, o;
    split4<int64_t>(e, g.kw, g.c, g.oc, &i, &j, &k, &o);
    C s = 0;
    for (int64_t p = threadIdx.x; p < positions; p += blockDim.x) {
      int64_t ow = p % g.ow, q = p / g.ow;
      int64_t oh = q % g.oh, b = q / g.oh;
      int64_t ih = oh * g.sh - g.pt + i * g.dh;
      int64_t iw = ow * g.sw - g.pl + j * g.dw;
      if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
      s += Num<T>::load(x[((b * g.h + ih) * g.w + iw) * g.c + k]) *
           Num<T>::load(dy[p * g.oc + o]);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int m = kThreads / 2; m > 0; m /= 2) {
      if ((int)threadIdx.x < m) part[threadIdx.x] += part[threadIdx.x + m];
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      FilterStrides fs = filter_strides(g);
      dw[i * fs.i + j * fs.j + k * fs.k + o * fs.o] = Num<T>::store(part[0]);
    }
    __syncthreads();
  }
}

/* Calls f(Tag<T>{}) for the float dtypes the ops allow on GPUs. */
template <typename F>
rf_status *visit(rf_dtype dt, F &&f) {
  switch (dt) {
    case RF_FLOAT64: return f(Tag<double>{});
    case RF_FLOAT16: return f(Tag<__half>{});
    case RF_BFLOAT16: return f(Tag<__nv_bfloat16>{});
    default: return f(Tag<float>{});
  }
}

/* cuDNN's turn when it takes g (conv_dnn.cuh); false: the direct kernel's. */
#ifdef RF_HAVE_CUDNN
bool use_dnn(const G &g, rf_dtype dt) { return dnn_conv_fits(g, dt); }
#define RF_CONV_DNN(ctx, kind, g, dt, a, b, out) \
  dnn_conv(ctx, ConvKind::kind, g, dt, a, b, out)
#else
bool use_dnn(const G &, rf_dtype) { return false; }
#define RF_CONV_DNN(ctx, kind, g, dt, a, b, out) ((rf_status *)NULL)
#endif

unsigned blocks_for(int64_t n) {
  const int64_t cap = 65535;
  return (unsigned)(n < cap ? (n > 0 ? n : 1) : cap);
}

rf_status *conv2d_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0], *f = ctx->inputs[1];
  G g;
  RF_CHECK(rf__conv2d_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.oh, g.ow, g.oc);
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &s, &y));
  int64_t n = y->num_elements;
  if (n == 0) return NULL;
  if (use_dnn(g, x->dtype))
    return RF_CONV_DNN(ctx, kForward, g, x->dtype, x->data, f->data, y->data);
  return visit(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_forward<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        g, (const T *)x->data, (const T *)f->data, (T *)y->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *conv2d_backprop_input_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *f = ctx->inputs[1], *dy = ctx->inputs[2];
  G g;
  RF_CHECK(rf__conv2d_backprop_input_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.h, g.w, g.c);
  rf_tensor *dx;
  RF_CHECK(alloc_output(ctx, 0, f->dtype, &s, &dx));
  int64_t n = dx->num_elements;
  if (n == 0) return NULL;
  if (use_dnn(g, f->dtype))
    return RF_CONV_DNN(ctx, kBackwardData, g, f->dtype, f->data, dy->data,
                       dx->data);
  return visit(f->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_input_grad<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        g, (const T *)f->data, (const T *)dy->data, (T *)dx->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *conv2d_backprop_filter_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0], *dy = ctx->inputs[2];
  G g;
  RF_CHECK(rf__conv2d_backprop_filter_prepare(ctx, &g));
  int64_t fd[4];
  rf__filter_dims(&g, fd);
  rf_shape s = rf_shape_of(4, fd[0], fd[1], fd[2], fd[3]);
  rf_tensor *dw;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &s, &dw));
  int64_t n = dw->num_elements;
  if (n == 0) return NULL;
  if (use_dnn(g, x->dtype))
    return RF_CONV_DNN(ctx, kBackwardFilter, g, x->dtype, x->data, dy->data,
                       dw->data);
  return visit(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_filter_grad<T><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
        g, (const T *)x->data, (const T *)dy->data, (T *)dw->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

/* relu(conv(x, f) + bias) in one cuDNN call; float32 only (the halves
 * would round once instead of after the convolution and after the bias,
 * unlike the unfused kernels). A bias that is not oc long, and whatever
 * cuDNN does not take, goes to the unfused kernels (BiasAdd's errors). */
rf_status *fused_conv2d_bias_relu_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
#ifdef RF_HAVE_CUDNN
  const rf_tensor *x = ctx->inputs[0], *f = ctx->inputs[1], *b = ctx->inputs[2];
  G g;
  RF_CHECK(rf__conv2d_prepare(ctx, &g));
  if (x->dtype == RF_FLOAT32 && b->dtype == RF_FLOAT32 && b->shape.rank == 1 &&
      b->shape.dims[0] == g.oc && use_dnn(g, x->dtype)) {
    rf_shape s = rf_shape_of(4, g.n, g.oh, g.ow, g.oc);
    rf_tensor *y;
    RF_CHECK(alloc_output(ctx, 0, x->dtype, &s, &y));
    bool fused = false;
    RF_CHECK(dnn_conv(ctx, ConvKind::kForward, g, x->dtype, x->data, f->data,
                      y->data, b->data, &fused));
    if (fused) return NULL;
  }
#endif
  return rf__fused_conv_bias_relu_unfused(ctx);
}

const rf__kernel_def defs[] = {RF_CONV_KERNELS(RF__GPU_KERNEL) RF__GPU_KERNEL(
    "_FusedConv2DBiasRelu", fused_conv2d_bias_relu_compute, 0, 0,
    RF_COST_EXPENSIVE)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_conv_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
