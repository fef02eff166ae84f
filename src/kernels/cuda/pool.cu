/* kernels/cuda/pool.cu - MaxPool, AvgPool and their gradients on the GPU
 * (NHWC), with the CPU kernels' rules (kernels/cpu/pool.c): padded positions
 * take no part, AvgPool divides by the count of input elements in the
 * window, MaxPool passes NaN through and its gradient goes to the first
 * maximum of each window in (row, column) order. Gradients gather: a thread
 * per input element visits the windows that hold it in (oh, ow) order, the
 * order in which the CPU scatters, so both add the same terms in the same
 * order and no atomics are needed (MaxPoolGrad over disjoint windows, the
 * CNN's 2x2 stride 2, scatters instead: max_pool_grad_disjoint).
 * float16/bfloat16 (GPU only) compute in float (Num<T>) and round once. */
#include "kernels/cuda/gpu_common.cuh"

extern "C" {
#include "kernels/conv_prepare.h"
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

using G = rf__conv_geom;

/* Output (oh, ow)'s window clipped to the input. */
__device__ void window(const G &g, int64_t oh, int64_t ow, int64_t *h0,
                       int64_t *h1, int64_t *w0, int64_t *w1) {
  int64_t hs = oh * g.sh - g.pt, ws = ow * g.sw - g.pl;
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = hs + g.kh < g.h ? hs + g.kh : g.h;
  *w1 = ws + g.kw < g.w ? ws + g.kw : g.w;
}

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

/* e = ((b * oh + y) * ow + x) * c + k of the output. */
template <typename T, bool kMax>
__global__ void pool_forward(G g, const T *x, T *y, int64_t n) {
  RF_GPU_LOOP(e, n) {
    int64_t k = e % g.c, r = e / g.c;
    int64_t ow = r % g.ow;
    r /= g.ow;
    int64_t oh = r % g.oh, b = r / g.oh;
    const T *img = x + b * g.h * g.w * g.c;
    if (kMax) {
      int64_t a = argmax(g, img, oh, ow, k);
      y[e] = a < 0 ? Num<T>::store(0) : img[a * g.c + k];
      continue;
    }
    int64_t h0, h1, w0, w1;
    window(g, oh, ow, &h0, &h1, &w0, &w1);
    using C = typename Num<T>::C;
    C s = 0;
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++)
        s += Num<T>::load(img[(ih * g.w + iw) * g.c + k]);
    int64_t cnt = (h1 - h0) * (w1 - w0);
    y[e] = Num<T>::store(cnt > 0 ? s / (C)cnt : s);
  }
}

/* dx (n, h, w, c) gathered from the windows holding each element. */
template <typename T, bool kMax>
__global__ void pool_grad(G g, const T *x, const T *dy, T *dx, int64_t n) {
  RF_GPU_LOOP(e, n) {
    int64_t k = e % g.c, r = e / g.c;
    int64_t iw = r % g.w;
    r /= g.w;
    int64_t ih = r % g.h, b = r / g.h;
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
    dx[e] = Num<T>::store(s);
  }
}

/* Calls f(Tag<T>{}) for the float dtypes the ops allow on GPUs. */
/* MaxPoolGrad when no two windows share an input element (stride >= window
 * on both axes): a thread per output element finds its window's argmax once
 * and writes the whole window, dy at the argmax and 0 elsewhere, so x is
 * read once rather than once per window visit. Elements in no window are
 * zeroed before (by the caller) unless the windows tile the input. */
template <typename T>
__global__ void max_pool_grad_disjoint(G g, const T *x, const T *dy, T *dx,
                                       int64_t n) {
  RF_GPU_LOOP(e, n) {
    int64_t k = e % g.c, r = e / g.c;
    int64_t ow = r % g.ow;
    r /= g.ow;
    int64_t oh = r % g.oh, b = r / g.oh;
    int64_t off = b * g.h * g.w * g.c;
    int64_t a = argmax(g, x + off, oh, ow, k);
    int64_t h0, h1, w0, w1;
    window(g, oh, ow, &h0, &h1, &w0, &w1);
    T v = dy[e], zero = Num<T>::store(0);
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++)
        dx[off + (ih * g.w + iw) * g.c + k] = ih * g.w + iw == a ? v : zero;
  }
}

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
    pool_forward<T, kMax><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
        g, (const T *)x->data, (T *)y->data, n);
    RF_GPU_LAUNCHED(ctx);
    return (rf_status *)NULL;
  });
}

rf_status *max_pool_compute(rf__kernel_ctx *ctx) { return forward<true>(ctx); }
rf_status *avg_pool_compute(rf__kernel_ctx *ctx) { return forward<false>(ctx); }

/* x: the original input (MaxPoolGrad) or NULL; dy: the output gradient. */
template <bool kMax>
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
      max_pool_grad_disjoint<T><<<grid(ctx, m), kThreads, 0, stream(ctx)>>>(
          g, (const T *)x->data, (const T *)dy->data, (T *)dx->data, m);
      RF_GPU_LAUNCHED(ctx);
      return (rf_status *)NULL;
    });
  }
  return visit(dy->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    pool_grad<T, kMax><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(
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

rf_status *avg_pool_grad_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  G g;
  RF_CHECK(rf__avg_pool_grad_prepare(ctx, &g));
  return backward<false>(ctx, g, nullptr, ctx->inputs[1]);
}

const rf__kernel_def defs[] = {RF_POOL_KERNELS(RF__GPU_KERNEL)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_pool_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
