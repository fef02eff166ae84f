/* kernels/cuda/pool.cu - MaxPool, AvgPool and their gradients on the GPU
 * (NHWC), with the CPU kernels' rules (kernels/cpu/pool.c): padded positions
 * take no part, AvgPool divides by the count of input elements in the
 * window, MaxPool passes NaN through and its gradient goes to the first
 * maximum of each window in (row, column) order. Gradients gather: a thread
 * per input element visits the windows that hold it in (oh, ow) order, the
 * order in which the CPU scatters, so both add the same terms in the same
 * order and no atomics are needed (MaxPoolGrad over disjoint windows, the
 * CNN's 2x2 stride 2, scatters instead: max_pool_grad_disjoint).
 * float16/bfloat16 (GPU only) compute in float (Num<T>) and round once.
 * _MaxPoolGradRelu (passes/fuse_epilogues.c) is MaxPoolGrad whose result
 * is kept only where the original input is positive: the _ReluGrad of the
 * ReLU the pool read, in the same pass (kRelu). */
#include <type_traits>

#include "kernels/cuda/gpu_common.cuh"
#include "kernels/cuda/window.cuh"

extern "C" {
#include "kernels/conv_prepare.h"
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

using G = rf__conv_geom;

/* The CPU's argmax: the image's (h * w + w) of the window's first maximum
 * for channel k (NaN wins), -1 when empty. x is the image. */
template <typename T>
__device__ int64_t argmax(const G &g, const T *x, int64_t oh, int64_t ow,
                          int64_t k) {
  int64_t h0, h1, w0, w1, best = -1;
  window(g, oh, ow, &h0, &h1, &w0, &w1);
  typename Num<T>::C m = 0;
  for (int64_t ih = h0; ih < h1; ih++)
    for (int64_t iw = w0; iw < w1; iw++) {
      typename Num<T>::C v = Num<T>::load(x[(ih * g.w + iw) * g.c + k]);
      if (best < 0 || (!isnan(m) && (v > m || isnan(v)))) {
        m = v;
        best = ih * g.w + iw;
      }
    }
  return best;
}

/* The forward kernels and the disjoint MaxPoolGrad are bound by memory when
 * their index arithmetic is cheap: a thread takes V adjacent channels of
 * one output position (a 16-byte vector when the channels and pointers
 * allow, so loads and stores are whole and coalesced), and the indices are
 * 32-bit when every offset fits (a 64-bit division costs tens of
 * instructions). Each lane computes exactly what a thread per element
 * would, in the same order, so the results are bit-identical. */
template <typename I>
struct PG {
  I n, h, w, cv; /* cv: channels / V */
  I oh, ow, kh, kw, sh, sw, pt, pl;
};

template <typename I>
PG<I> pg(const G &g, int v) {
  return PG<I>{(I)g.n,  (I)g.h,  (I)g.w,  (I)(g.c / v), (I)g.oh, (I)g.ow,
               (I)g.kh, (I)g.kw, (I)g.sh, (I)g.sw,      (I)g.pt, (I)g.pl};
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

/* Item e (V channels of one output position): its image offset (in
 * vectors), window and channel vector. */
template <typename I>
__device__ __forceinline__ void item(const PG<I> &g, I e, I *img, I *kv, I *h0,
                                     I *h1, I *w0, I *w1) {
  I b, oh, ow;
  split4(e, g.oh, g.ow, g.cv, &b, &oh, &ow, kv);
  *img = b * g.h * g.w * g.cv;
  window(g, oh, ow, h0, h1, w0, w1);
}

/* The CPU's argmax per lane: the window's first maximum in (row, column)
 * order, NaN winning; pos = ih * w + iw, -1 for an empty window. m holds
 * the maximum's own bits. */
template <typename T, int V, typename I>
__device__ __forceinline__ void vargmax(const PG<I> &g, const Vec<T, V> *x,
                                        I kv, I h0, I h1, I w0, I w1,
                                        Vec<T, V> *m, I pos[V]) {
  using C = typename Num<T>::C;
  C best[V];
  for (int l = 0; l < V; l++) pos[l] = -1, best[l] = 0;
  for (I ih = h0; ih < h1; ih++)
    for (I iw = w0; iw < w1; iw++) {
      Vec<T, V> v = x[(ih * g.w + iw) * g.cv + kv];
      for (int l = 0; l < V; l++) {
        C a = Num<T>::load(v.v[l]);
        if (pos[l] < 0 || (!isnan(best[l]) && (a > best[l] || isnan(a)))) {
          best[l] = a;
          m->v[l] = v.v[l];
          pos[l] = ih * g.w + iw;
        }
      }
    }
}

/* n items of V channels each. */
template <typename T, int V, typename I, bool kMax>
__global__ void pool_forward(PG<I> g, const Vec<T, V> *x, Vec<T, V> *y, I n) {
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (I)blockDim.x * gridDim.x) {
    I img, kv, h0, h1, w0, w1;
    item(g, e, &img, &kv, &h0, &h1, &w0, &w1);
    Vec<T, V> out;
    if (kMax) {
      I pos[V];
      vargmax(g, x + img, kv, h0, h1, w0, w1, &out, pos);
      for (int l = 0; l < V; l++)
        if (pos[l] < 0) out.v[l] = Num<T>::store(0);
    } else {
      using C = typename Num<T>::C;
      C s[V];
      for (int l = 0; l < V; l++) s[l] = 0;
      for (I ih = h0; ih < h1; ih++)
        for (I iw = w0; iw < w1; iw++) {
          Vec<T, V> v = x[img + (ih * g.w + iw) * g.cv + kv];
          for (int l = 0; l < V; l++) s[l] += Num<T>::load(v.v[l]);
        }
      I cnt = (h1 - h0) * (w1 - w0);
      for (int l = 0; l < V; l++)
        out.v[l] = Num<T>::store(cnt > 0 ? s[l] / (C)cnt : s[l]);
    }
    y[e] = out;
  }
}

/* MaxPoolGrad when no two windows share an input element (stride >= window
 * on both axes): an item finds its window's argmax once and writes the
 * whole window, dy at the argmax and 0 elsewhere, so x is read once rather
 * than once per window visit. Elements in no window are zeroed before (by
 * the caller) unless the windows tile the input. */
template <typename T, int V, typename I, bool kRelu>
__global__ void max_pool_grad_disjoint(PG<I> g, const Vec<T, V> *x,
                                       const Vec<T, V> *dy, Vec<T, V> *dx,
                                       I n) {
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (I)blockDim.x * gridDim.x) {
    I img, kv, h0, h1, w0, w1, pos[V];
    item(g, e, &img, &kv, &h0, &h1, &w0, &w1);
    Vec<T, V> m;
    vargmax(g, x + img, kv, h0, h1, w0, w1, &m, pos);
    Vec<T, V> v = dy[e], out;
    T zero = Num<T>::store(0);
    /* ReLU's gradient: the argmax is the element, x there its value. */
    if (kRelu)
      for (int l = 0; l < V; l++)
        if (!(Num<T>::load(m.v[l]) > 0)) v.v[l] = zero;
    for (I ih = h0; ih < h1; ih++)
      for (I iw = w0; iw < w1; iw++) {
        for (int l = 0; l < V; l++)
          out.v[l] = ih * g.w + iw == pos[l] ? v.v[l] : zero;
        dx[img + (ih * g.w + iw) * g.cv + kv] = out;
      }
  }
}

/* Calls f(std::integral_constant<int, V>{}, I{}) for a pass over tensors
 * (ptrs, nptrs of them) of g.c channels of T: V fills 16 bytes when every
 * pointer is aligned to that and the channels fill whole vectors, else 1;
 * I is int32_t when every offset (at most `most` elements, the window and
 * stride bounded) and the grid-stride loop's index fit, else int64_t. */
template <typename T, typename F>
rf_status *vector_launch(const G &g, const void *const *ptrs, int nptrs,
                         int64_t most, F &&f) {
  constexpr int kV = (int)(16 / sizeof(T));
  bool vec = g.c % kV == 0;
  for (int i = 0; i < nptrs && vec; i++)
    vec = (uintptr_t)ptrs[i] % (sizeof(T) * kV) == 0;
  const int64_t small = int64_t(1) << 20;
  bool i32 = most <= INT32_MAX / 2 && g.kh <= small && g.kw <= small &&
             g.sh <= small && g.sw <= small && g.pt <= small && g.pl <= small;
  using One = std::integral_constant<int, 1>;
  using Wide = std::integral_constant<int, kV>;
  if (vec) return i32 ? f(Wide{}, int32_t{}) : f(Wide{}, int64_t{});
  return i32 ? f(One{}, int32_t{}) : f(One{}, int64_t{});
}

/* dx (n, h, w, c) gathered from the windows holding each element. */
template <typename T, bool kMax, bool kRelu>
__global__ void pool_grad(G g, const T *x, const T *dy, T *dx, int64_t n) {
  RF_GPU_LOOP(e, n) {
    int64_t b, ih, iw, k;
    split4<int64_t>(e, g.h, g.w, g.c, &b, &ih, &iw, &k);
    /* outputs whose window [o s - p, o s - p + k) holds i */
    int64_t t = ih + g.pt - g.kh + 1;
    int64_t oh0 = t <= 0 ? 0 : (t + g.sh - 1) / g.sh;
    int64_t oh1 = (ih + g.pt) / g.sh + 1;
    t = iw + g.pl - g.kw + 1;
    int64_t ow0 = t <= 0 ? 0 : (t + g.sw - 1) / g.sw;
    int64_t ow1 = (iw + g.pl) / g.sw + 1;
    if (oh1 > g.oh) oh1 = g.oh;
    if (ow1 > g.ow) ow1 = g.ow;
    const T *img = kMax ? x + b * g.h * g.w * g.c : nullptr;
    const T *d = dy + b * g.oh * g.ow * g.c;
    using C = typename Num<T>::C;
    C s = 0;
    for (int64_t oh = oh0; oh < oh1; oh++)
      for (int64_t ow = ow0; ow < ow1; ow++) {
        C v = Num<T>::load(d[(oh * g.ow + ow) * g.c + k]);
        if (kMax) {
          if (argmax(g, img, oh, ow, k) == ih * g.w + iw) s += v;
        } else {
          int64_t h0, h1, w0, w1;
          window(g, oh, ow, &h0, &h1, &w0, &w1);
          s += v / (C)((h1 - h0) * (w1 - w0));
        }
      }
    if (kRelu && !(Num<T>::load(x[e]) > 0)) s = 0;
    dx[e] = Num<T>::store(s);
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

template <bool kMax>
rf_status *forward(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  const rf_tensor *x = ctx->inputs[0];
  G g;
  RF_CHECK(rf__pool_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.oh, g.ow, g.c);
  rf_tensor *y;
  RF_CHECK(alloc_output(ctx, 0, x->dtype, &s, &y));
  int64_t n = y->num_elements;
  if (n == 0) return NULL;
  return visit(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const void *p[2] = {x->data, y->data};
    return vector_launch<T>(g, p, 2, x->num_elements, [&](auto v, auto i) {
      constexpr int V = decltype(v)::value;
      using I = decltype(i);
      I items = (I)(n / V);
      pool_forward<T, V, I, kMax>
          <<<grid(ctx, items), kThreads, 0, stream(ctx)>>>(
              pg<I>(g, V), (const Vec<T, V> *)x->data, (Vec<T, V> *)y->data,
              items);
      RF_GPU_LAUNCHED(ctx);
      return (rf_status *)NULL;
    });
  });
}

rf_status *max_pool_compute(rf__kernel_ctx *ctx) { return forward<true>(ctx); }
rf_status *avg_pool_compute(rf__kernel_ctx *ctx) { return forward<false>(ctx); }

/* x: the original input (MaxPoolGrad) or NULL; dy: the output gradient;
 * kRelu: kept where x > 0 (_MaxPoolGradRelu). */
template <bool kMax, bool kRelu = false>
rf_status *backward(rf__kernel_ctx *ctx, const G &g, const rf_tensor *x,
                    const rf_tensor *dy) {
  rf_shape s = rf_shape_of(4, g.n, g.h, g.w, g.c);
  rf_tensor *dx;
  RF_CHECK(alloc_output(ctx, 0, dy->dtype, &s, &dx));
  int64_t n = dx->num_elements;
  if (n == 0) return NULL;
  if (kMax && g.sh >= g.kh && g.sw >= g.kw) {
    bool tiled = g.pt == 0 && g.pl == 0 && g.sh == g.kh && g.sw == g.kw &&
                 g.oh * g.sh == g.h && g.ow * g.sw == g.w;
    if (!tiled)
      RF_GPU_CHECK(
          ctx, cudaMemsetAsync(dx->data, 0, rf_tensor_nbytes(dx), stream(ctx)));
    int64_t m = dy->num_elements;
    if (m == 0) return NULL;
    return visit(dy->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const void *p[3] = {x->data, dy->data, dx->data};
      return vector_launch<T>(g, p, 3, n, [&](auto v, auto i) {
        constexpr int V = decltype(v)::value;
        using I = decltype(i);
        I items = (I)(m / V);
        max_pool_grad_disjoint<T, V, I, kRelu>
            <<<grid(ctx, items), kThreads, 0, stream(ctx)>>>(
                pg<I>(g, V), (const Vec<T, V> *)x->data,
                (const Vec<T, V> *)dy->data, (Vec<T, V> *)dx->data, items);
        RF_GPU_LAUNCHED(ctx);
        return (rf_status *)NULL;
      });
    });
  }
  return visit(dy->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    pool_grad<T, kMax, kRelu><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        g, x ? (const T *)x->data : nullptr, (const T *)dy->data, (T *)dx->data,
        n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *max_pool_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  G g;
  RF_CHECK(rf__max_pool_grad_prepare(ctx, &g));
  return backward<true>(ctx, g, ctx->inputs[0], ctx->inputs[2]);
}

rf_status *max_pool_grad_relu_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  G g;
  RF_CHECK(rf__max_pool_grad_prepare(ctx, &g));
  return backward<true, true>(ctx, g, ctx->inputs[0], ctx->inputs[2]);
}

rf_status *avg_pool_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  G g;
  RF_CHECK(rf__avg_pool_grad_prepare(ctx, &g));
  return backward<false>(ctx, g, nullptr, ctx->inputs[1]);
}

const rf__kernel_def defs[] = {RF_POOL_KERNELS(RF__GPU_KERNEL) RF__GPU_KERNEL(
    "_MaxPoolGradRelu", max_pool_grad_relu_compute, 0, 0, RF_COST_EXPENSIVE)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_pool_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
