/* kernels/cpu/conv_direct.c - see conv_direct.h. Each image is first copied
 * into a zero-bordered buffer (the padding made explicit), so the loops
 * have no edge cases:
 *   forward: y[oh, ow, :] = sum_{i,j} xp[oh + i, ow + j] w[i, j, :], in
 *     tiles of 14 pixels of a row x 32 channels held in 28 zmm registers,
 *     one broadcast input and two filter vectors a step;
 *   filter grad: dw[i, j, :] = sum_{oh,ow} xp[oh + i, ow + j] dy[oh, ow, :],
 *     12 or 13 taps of a 5x5 window (else a few filter rows) x 32 channels
 *     held in registers over an image's pixels, two dy vectors and a
 *     broadcast input a step.
 * Needs AVX-512F; elsewhere oneDNN or im2col keeps these shapes. */
#include "kernels/cpu/conv_direct.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "device/device.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CONV_DIRECT 1
#endif

#ifdef HAVE_CONV_DIRECT

#define AVX512 __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((always_inline))

/* Forward: blocks of images a pool thread. The pool hands them out as
 * threads come free, so a thread woken late or sharing its core holds up
 * less of the op (batch 64, 2 threads, best of 100, four runs: 0.28-0.32 ms
 * against 0.32-0.33 with one block a thread). The filter gradient keeps one
 * block a thread: each block's first image misses the prefetch of its dy
 * (0.30-0.35 ms with one, 0.34-0.39 with four). */
#define FWD_BLOCKS_PER_THREAD 4
#define PX 14    /* forward: pixels a tile (x 2 vectors: 28 accumulators) */
#define MAX_NR 4 /* filter grad: filter rows a tile */
/* Filter rows a filter-gradient tile of kw x v vectors keeps (at most 24
 * accumulators beside the v dy vectors and a broadcast): 2, 2 and 1 for
 * 5x5 and 32 channels, each pass reading the image's dy (from L2 after the
 * first). */
#define NR_FOR(kw, v) \
  ((24 / ((kw) * (v))) < MAX_NR ? 24 / ((kw) * (v)) : MAX_NR)

typedef struct job {
  const rf__conv_geom *g;
  const float *x, *w, *dy; /* w: HWIO, (kh * kw, oc) */
  float *out;              /* forward: y; filter grad: a (kh*kw, oc) a block */
  float *pad;              /* one padded image a block */
  int64_t hp, wp;          /* the padded image's rows and row length */
  int64_t per, n_blocks;
} job;

/* *p in all 16 lanes, as one load: written as asm so the compiler cannot
 * reuse the scalar a tile's next column reads (it then broadcast from a
 * register, a shuffle a multiply-add: measured 30% slower). */
INLINE AVX512 __m512 bcast(const float *p) {
  __m512 b;
  __asm__("vbroadcastss %1, %0" : "=v"(b) : "m"(*p));
  return b;
}

/* Image x into pad at (pt, pl); the border stays as zeroed. */
static void pad_image(const job *j, const float *x, float *pad) {
  const rf__conv_geom *g = j->g;
  for (int64_t r = 0; r < g->h; r++)
    memcpy(pad + (r + g->pt) * j->wp + g->pl, x + r * g->w,
           (size_t)g->w * sizeof(float));
}

/* PX pixels of y (ldy apart) from xp (the padded image at the tile's first
 * window) and w (at the tile's first channel), V vectors of channels. */
INLINE AVX512 void fwd_tile(int V, const float *xp, int64_t wp, int64_t kh,
                            int64_t kw, const float *w, int64_t oc, float *y,
                            int64_t ldy) {
  __m512 acc[PX][2];
#pragma GCC unroll 14
  for (int p = 0; p < PX; p++) acc[p][0] = acc[p][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < kh; i++) {
    const float *xr = xp + i * wp, *wr = w + i * kw * oc;
    for (int64_t jj = 0; jj < kw; jj++) {
      __m512 w0 = _mm512_loadu_ps(wr + jj * oc);
      __m512 w1 = V > 1 ? _mm512_loadu_ps(wr + jj * oc + 16) : w0;
#pragma GCC unroll 14
      for (int p = 0; p < PX; p++) {
        __m512 b = bcast(xr + jj + p);
        acc[p][0] = _mm512_fmadd_ps(b, w0, acc[p][0]);
        if (V > 1) acc[p][1] = _mm512_fmadd_ps(b, w1, acc[p][1]);
      }
    }
  }
#pragma GCC unroll 14
  for (int p = 0; p < PX; p++) {
    _mm512_storeu_ps(y + p * ldy, acc[p][0]);
    if (V > 1) _mm512_storeu_ps(y + p * ldy + 16, acc[p][1]);
  }
}

static AVX512 void fwd_tile_v(int V, const float *xp, int64_t wp, int64_t kh,
                              int64_t kw, const float *w, int64_t oc, float *y,
                              int64_t ldy) {
  if (V == 2)
    fwd_tile(2, xp, wp, kh, kw, w, oc, y, ldy);
  else
    fwd_tile(1, xp, wp, kh, kw, w, oc, y, ldy);
}

static AVX512 void fwd_blocks(void *arg, int64_t b0, int64_t b1) {
  const job *j = arg;
  const rf__conv_geom *g = j->g;
  int64_t oc = g->oc;
  for (int64_t blk = b0; blk < b1; blk++) {
    float *pad = j->pad + blk * j->hp * j->wp;
    memset(pad, 0, (size_t)(j->hp * j->wp) * sizeof(float));
    int64_t first = blk * j->per;
    int64_t last = first + j->per < g->n ? first + j->per : g->n;
    for (int64_t n = first; n < last; n++) {
      pad_image(j, j->x + n * g->h * g->w, pad);
      float *yn = j->out + n * g->oh * g->ow * oc;
      for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow0 = 0; ow0 < g->ow; ow0 += PX) {
          /* the last tile of a row ends at the row's end, overlapping the
           * one before (same values written twice) */
          int64_t o = ow0 + PX <= g->ow ? ow0 : g->ow - PX;
          for (int64_t c0 = 0; c0 < oc; c0 += 32) {
            int V = oc - c0 >= 32 ? 2 : 1;
            const float *xp = pad + oh * j->wp + (o > 0 ? o : 0);
            if (o >= 0) {
              fwd_tile_v(V, xp, j->wp, g->kh, g->kw, j->w + c0, oc,
                         yn + (oh * g->ow + o) * oc + c0, oc);
              continue;
            }
            /* a row narrower than a tile: through a tile-sized buffer */
            float tmp[PX * 32];
            fwd_tile_v(V, xp, j->wp, g->kh, g->kw, j->w + c0, oc, tmp, 32);
            for (int64_t p = 0; p < g->ow; p++)
              memcpy(yn + (oh * g->ow + p) * oc + c0, tmp + p * 32,
                     (size_t)(16 * V) * sizeof(float));
          }
        }
    }
  }
}

/* Filter rows [i0, i0 + NR) of dw (at (i0, 0) and the tile's first channel,
 * added to) from one image: xp the padded image at row i0, dy at the
 * tile's first channel, pf (elements; 0: none) the offset of what to
 * prefetch. KW, V, NR constants where inlined, so the NR x KW x V
 * accumulators live in registers. All 25 taps of a 5x5 window a tile (16
 * channels, one pass over dy a 16-channel slice) measured slower: 0.70
 * against 0.66 ms at batch 64, one thread (a load a multiply-add). */
INLINE AVX512 void grad_tile(int V, int KW, int NR, const rf__conv_geom *g,
                             const float *xp, int64_t wp, const float *dy,
                             int64_t pf, float *dw) {
  int64_t oc = g->oc;
  __m512 acc[MAX_NR][5][2];
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 5
    for (int jj = 0; jj < KW; jj++)
      acc[r][jj][0] = acc[r][jj][1] = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < g->oh; oh++) {
    const float *xr = xp + oh * wp, *dr = dy + oh * g->ow * oc;
    for (int64_t ow = 0; ow < g->ow; ow++) {
      __m512 d0 = _mm512_loadu_ps(dr + ow * oc);
      __m512 d1 = V > 1 ? _mm512_loadu_ps(dr + ow * oc + 16) : d0;
      if (pf) {
        _mm_prefetch((const char *)(dr + ow * oc + pf), _MM_HINT_T1);
        if (V > 1)
          _mm_prefetch((const char *)(dr + ow * oc + pf + 16), _MM_HINT_T1);
      }
#pragma GCC unroll 4
      for (int r = 0; r < NR; r++)
#pragma GCC unroll 5
        for (int jj = 0; jj < KW; jj++) {
          __m512 b = bcast(xr + r * wp + ow + jj);
          acc[r][jj][0] = _mm512_fmadd_ps(b, d0, acc[r][jj][0]);
          if (V > 1) acc[r][jj][1] = _mm512_fmadd_ps(b, d1, acc[r][jj][1]);
        }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 5
    for (int jj = 0; jj < KW; jj++)
      for (int v = 0; v < V; v++) {
        float *o = dw + (r * KW + jj) * oc + 16 * v;
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[r][jj][v]));
      }
}

/* Taps [T0, T0 + T) of a 5x5 window (tap t: row t / 5, column t % 5) of dw
 * for 32 channels from one image, added to dw (at tap 0 and the tile's
 * first channel); xp, dy and pf as grad_tile's. T0 and T are constants
 * where inlined. */
INLINE AVX512 void grad_taps(int T0, int T, const rf__conv_geom *g,
                             const float *xp, int64_t wp, const float *dy,
                             int64_t pf, float *dw) {
  int64_t oc = g->oc;
  __m512 acc[13][2];
#pragma GCC unroll 13
  for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < g->oh; oh++) {
    const float *xr = xp + oh * wp, *dr = dy + oh * g->ow * oc;
    for (int64_t ow = 0; ow < g->ow; ow++) {
      __m512 d0 = _mm512_loadu_ps(dr + ow * oc);
      __m512 d1 = _mm512_loadu_ps(dr + ow * oc + 16);
      if (pf) {
        _mm_prefetch((const char *)(dr + ow * oc + pf), _MM_HINT_T1);
        _mm_prefetch((const char *)(dr + ow * oc + pf + 16), _MM_HINT_T1);
      }
#pragma GCC unroll 13
      for (int t = 0; t < T; t++) {
        __m512 b = bcast(xr + (T0 + t) / 5 * wp + ow + (T0 + t) % 5);
        acc[t][0] = _mm512_fmadd_ps(b, d0, acc[t][0]);
        acc[t][1] = _mm512_fmadd_ps(b, d1, acc[t][1]);
      }
    }
  }
#pragma GCC unroll 13
  for (int t = 0; t < T; t++)
    for (int v = 0; v < 2; v++) {
      float *o = dw + (T0 + t) * oc + 16 * v;
      _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[t][v]));
    }
}

/* A 5x5 window's taps in two passes over dy (12 and 13 taps: 24 and 26
 * accumulators) instead of three of filter rows (2, 2 and 1): batch 64,
 * one thread, best of 60, three runs: 0.56-0.57 ms against 0.61-0.63. */
static AVX512 void grad_5x5(const rf__conv_geom *g, const float *xp, int64_t wp,
                            const float *dy, int64_t pf, float *dw) {
  grad_taps(0, 12, g, xp, wp, dy, pf, dw);
  grad_taps(12, 13, g, xp, wp, dy, 0, dw);
}

/* One tile of NR_FOR(kw, V) filter rows, or of one (nr == 1). */
static AVX512 void grad_tile_v(int V, int64_t kw, bool one,
                               const rf__conv_geom *g, const float *xp,
                               int64_t wp, const float *dy, int64_t pf,
                               float *dw) {
#define GRAD_CASE(V_, KW_)                                        \
  if (V == V_ && kw == KW_) {                                     \
    if (one)                                                      \
      grad_tile(V_, KW_, 1, g, xp, wp, dy, pf, dw);               \
    else                                                          \
      grad_tile(V_, KW_, NR_FOR(KW_, V_), g, xp, wp, dy, pf, dw); \
    return;                                                       \
  }
  GRAD_CASE(2, 5)
  GRAD_CASE(1, 5)
  GRAD_CASE(2, 3)
  GRAD_CASE(1, 3)
#undef GRAD_CASE
}

static AVX512 void grad_blocks(void *arg, int64_t b0, int64_t b1) {
  const job *j = arg;
  const rf__conv_geom *g = j->g;
  int64_t oc = g->oc, kw = g->kw;
  for (int64_t blk = b0; blk < b1; blk++) {
    float *pad = j->pad + blk * j->hp * j->wp;
    float *dw = j->out + blk * g->kh * kw * oc;
    memset(pad, 0, (size_t)(j->hp * j->wp) * sizeof(float));
    memset(dw, 0, (size_t)(g->kh * kw * oc) * sizeof(float));
    int64_t first = blk * j->per;
    int64_t last = first + j->per < g->n ? first + j->per : g->n;
    for (int64_t n = first; n < last; n++) {
      pad_image(j, j->x + n * g->h * g->w, pad);
      const float *dyn = j->dy + n * g->oh * g->ow * oc;
      for (int64_t c0 = 0; c0 < oc; c0 += 32) {
        int V = oc - c0 >= 32 ? 2 : 1;
        if (V == 2 && g->kh == 5 && kw == 5) {
          int64_t pf = n + 1 < last ? g->oh * g->ow * oc : 0;
          grad_5x5(g, pad, j->wp, dyn + c0, pf, dw + c0);
          continue;
        }
        int64_t nr = NR_FOR(kw, V);
        for (int64_t i0 = 0; i0 < g->kh;) {
          bool one = g->kh - i0 < nr;
          /* the first pass over this image's dy fetches the next's into
           * L2 (batch 64, one thread: 0.59-0.61 ms against 0.65-0.66) */
          int64_t pf = i0 == 0 && n + 1 < last ? g->oh * g->ow * oc : 0;
          grad_tile_v(V, kw, one, g, pad + i0 * j->wp, j->wp, dyn + c0, pf,
                      dw + i0 * kw * oc + c0);
          i0 += one ? 1 : nr;
        }
      }
    }
  }
}

static bool enabled(void) {
  static int on = -1; /* RF_CPU_CONV read once; -1: not yet */
  int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *e = getenv("RF_CPU_CONV");
    v = !(e && *e) && __builtin_cpu_supports("avx512f");
    __atomic_store_n(&on, v, __ATOMIC_RELAXED);
  }
  return v == 1;
}

bool rf__conv_direct_fits(rf__conv_dnnl_kind kind, const rf__conv_geom *g) {
  if (kind == RF_CONV_DNNL_INPUT_GRAD || g->c != 1 || g->oc <= 0 ||
      g->oc % 16 != 0 || g->sh != 1 || g->sw != 1 || g->dh != 1 || g->dw != 1 ||
      g->pt < 0 || g->pl < 0 || g->n <= 0 || g->oh <= 0 || g->ow <= 0 ||
      g->kh <= 0 || g->kw <= 0)
    return false;
  /* the filter gradient's tiles are unrolled over the window's width */
  if (kind == RF_CONV_DNNL_FILTER_GRAD && g->kw != 3 && g->kw != 5)
    return false;
  return enabled();
}

rf_status *rf__conv_direct_run(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                               const rf__conv_geom *g, const float *x,
                               const float *w, const float *dy, float *out) {
  int64_t threads = ctx->device && ctx->device->pool
                        ? rf__threadpool_size(ctx->device->pool)
                        : 1;
  job j = {.g = g, .x = x, .dy = dy, .out = out};
  bool grad = kind == RF_CONV_DNNL_FILTER_GRAD;
  int64_t blocks = grad ? threads : threads * FWD_BLOCKS_PER_THREAD;
  j.n_blocks = g->n < blocks ? g->n : blocks;
  if (j.n_blocks < 1) j.n_blocks = 1;
  j.per = (g->n + j.n_blocks - 1) / j.n_blocks;
  j.n_blocks = (g->n + j.per - 1) / j.per;
  /* rows and columns that the windows reach, and the image placed at
   * (pt, pl); a forward tile reads PX + kw - 1 columns however narrow */
  int64_t ow = g->ow > PX ? g->ow : PX;
  j.hp = g->oh + g->kh - 1 > g->pt + g->h ? g->oh + g->kh - 1 : g->pt + g->h;
  j.wp = ow + g->kw - 1 > g->pl + g->w ? ow + g->kw - 1 : g->pl + g->w;
  int64_t taps = g->kh * g->kw, m = taps * g->oc;
  size_t pad = (size_t)(j.hp * j.wp) * (size_t)j.n_blocks;
  size_t filt = grad ? (size_t)(m * j.n_blocks) : g->ohwi ? (size_t)m : 0;
  float *buf = rf__malloc((pad + filt) * sizeof(float));
  if (!buf)
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for the convolution's scratch");
  j.pad = buf;
  float *f = buf + pad;
  if (grad)
    j.out = f;
  else if (g->ohwi) {
    /* one input channel: OHWI is (oc, taps); the tiles read (taps, oc) */
    for (int64_t t = 0; t < taps; t++)
      for (int64_t o = 0; o < g->oc; o++) f[t * g->oc + o] = w[o * taps + t];
    j.w = f;
  } else
    j.w = w;
  int64_t cost = j.per * g->oh * g->ow * m;
  rf__kernel_parallel_for(ctx, j.n_blocks, cost > 0 ? cost : 1,
                          grad ? grad_blocks : fwd_blocks, &j);
  if (grad) {
    /* the blocks' sums, in block order, into the filter's layout */
    for (int64_t b = 1; b < j.n_blocks; b++)
      for (int64_t i = 0; i < m; i++) f[i] += f[b * m + i];
    if (g->ohwi)
      for (int64_t t = 0; t < taps; t++)
        for (int64_t o = 0; o < g->oc; o++)
          out[o * taps + t] = f[t * g->oc + o];
    else
      memcpy(out, f, (size_t)m * sizeof(float));
  }
  rf__free(buf);
  return NULL;
}

#else /* no AVX-512 on this compiler / architecture: oneDNN or im2col */

bool rf__conv_direct_fits(rf__conv_dnnl_kind kind, const rf__conv_geom *g) {
  (void)kind, (void)g;
  return false;
}

rf_status *rf__conv_direct_run(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                               const rf__conv_geom *g, const float *x,
                               const float *w, const float *dy, float *out) {
  (void)ctx, (void)kind, (void)g, (void)x, (void)w, (void)dy, (void)out;
  return NULL;
}

#endif
