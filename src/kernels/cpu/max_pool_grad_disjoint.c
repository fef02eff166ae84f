/* kernels/cpu/max_pool_grad_disjoint.c - float32 MaxPoolGrad for windows
 * that do not overlap (stride >= window: the usual 2x2 pool of stride 2).
 *
 * Why: pool.c's generic loops (any stride, float64 too) zero dx, find each
 * window's first maximum, then add the gradient into dx window by window;
 * GCC compiles their NaN-aware selects to scalar branches, and MaxPoolGrad
 * took 9-11% of a CNN training step's CPU time, 7-10x its forward pass. A
 * window that overlaps no other can write each of its elements once (the
 * gradient or 0), so here each window is one pass of 16-channel vectors to
 * find the first maximum (masks, no branches) and one pass of masked
 * stores. Elements in no window (a stride larger than the window, a VALID
 * remainder) are zeroed first. Needs AVX-512F; elsewhere pool.c's loops. */
#include "kernels/cpu/max_pool_grad_disjoint.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512_POOL 1
#endif

#ifdef HAVE_AVX512_POOL

#define AVX512 __attribute__((target("avx512f")))

/* Window [h0, h1) x [w0, w1) of output (oh, ow), clipped to the input (as
 * pool.c's window()). */
static void window(const rf__conv_geom *g, int64_t oh, int64_t ow, int64_t *h0,
                   int64_t *h1, int64_t *w0, int64_t *w1) {
  int64_t hs = oh * g->sh - g->pt, ws = ow * g->sw - g->pl;
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = hs + g->kh < g->h ? hs + g->kh : g->h;
  *w1 = ws + g->kw < g->w ? ws + g->kw : g->w;
}

bool rf__max_pool_grad_disjoint_fits(const rf__conv_geom *g) {
  if (g->sh < g->kh || g->sw < g->kw) return false;
  if (g->kh * g->kw > INT32_MAX) return false; /* places counted in int32 */
  return __builtin_cpu_supports("avx512f");
}

/* Channels k0 .. k0 + 16 (mask mk) of one window: at = the place (row-major
 * in the clipped window) of the element pool.c's argmax takes: an element
 * replaces the running maximum when larger or NaN, unless that is NaN. */
static inline __attribute__((always_inline)) AVX512 __m512i
first_max(const float *x, int64_t ldh, int64_t ldw, int64_t nh, int64_t nw,
          __mmask16 mk) {
  __m512 m = _mm512_maskz_loadu_ps(mk, x);
  __m512i at = _mm512_setzero_si512();
  int32_t p = 0;
  for (int64_t ih = 0; ih < nh; ih++)
    for (int64_t iw = 0; iw < nw; iw++, p++) {
      if (p == 0) continue;
      __m512 v = _mm512_maskz_loadu_ps(mk, x + ih * ldh + iw * ldw);
      __mmask16 take = _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q) &
                       (_mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) |
                        _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
      m = _mm512_mask_mov_ps(m, take, v);
      at = _mm512_mask_mov_epi32(at, take, _mm512_set1_epi32(p));
    }
  return at;
}

AVX512 void rf__max_pool_grad_disjoint(const rf__conv_geom *g, const float *x,
                                       const float *dy, float *dx) {
  int64_t c = g->c, ldw = c, ldh = g->w * c;
  bool covered = g->sh == g->kh && g->sw == g->kw &&
                 g->oh * g->kh - g->pt >= g->h && g->ow * g->kw - g->pl >= g->w;
  if (!covered) memset(dx, 0, sizeof(float) * (size_t)(g->h * ldh));
  for (int64_t oh = 0; oh < g->oh; oh++)
    for (int64_t ow = 0; ow < g->ow; ow++) {
      int64_t h0, h1, w0, w1;
      window(g, oh, ow, &h0, &h1, &w0, &w1);
      if (h0 >= h1 || w0 >= w1) continue;
      const float *xw = x + h0 * ldh + w0 * ldw;
      float *dxw = dx + h0 * ldh + w0 * ldw;
      const float *d = dy + (oh * g->ow + ow) * c;
      for (int64_t k0 = 0; k0 < c; k0 += 16) {
        __mmask16 mk = c - k0 >= 16 ? (__mmask16)0xFFFF
                                    : (__mmask16)((1u << (c - k0)) - 1);
        __m512i at = first_max(xw + k0, ldh, ldw, h1 - h0, w1 - w0, mk);
        __m512 dk = _mm512_maskz_loadu_ps(mk, d + k0);
        int32_t p = 0;
        for (int64_t ih = 0; ih < h1 - h0; ih++)
          for (int64_t iw = 0; iw < w1 - w0; iw++, p++) {
            __mmask16 hit = _mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(p));
            _mm512_mask_storeu_ps(dxw + ih * ldh + iw * ldw + k0, mk,
                                  _mm512_maskz_mov_ps(hit, dk));
          }
      }
    }
}

#else /* no AVX-512 on this compiler / architecture: pool.c's loops */

bool rf__max_pool_grad_disjoint_fits(const rf__conv_geom *g) {
  (void)g;
  return false;
}

void rf__max_pool_grad_disjoint(const rf__conv_geom *g, const float *x,
                                const float *dy, float *dx) {
  (void)g, (void)x, (void)dy, (void)dx;
}

#endif
