/* kernels/cpu/conv.c - Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter
 * on the CPU (NHWC, filter HWIO or OHWI) as im2col + OpenBLAS gemm, one
 * image at a time: an image's patches form col (oh*ow, kh*kw*c), row-major
 * in the filter's (kh, kw, c) order, so an HWIO filter is already the
 * (K, oc) matrix W and an OHWI one is W^T, (oc, K), which the gemms read
 * transposed (no copy):
 *   forward:  y_n = col_n W;  input grad: dx_n = col2im(dy_n W^T);
 *   filter grad: dW = sum_n col_n^T dy_n (OHWI: dW^T = sum_n dy_n^T col_n).
 * A 1x1 window with stride 1 and no padding uses the image itself as col.
 * OpenBLAS runs single-threaded (blas_threads.c); images are split into one
 * block per pool thread. The filter gradient's blocks each sum their images
 * into their own buffer, added in block order: the result depends only on
 * the shapes and the pool size, not on scheduling. float32 goes through
 * oneDNN's direct kernels first (conv_dnnl.c: 2-4x faster than this on
 * AVX-512), or, with one input channel, ringflow's own direct loops
 * (conv_direct.c); this path is float64's, and float32's where oneDNN is
 * absent or has no implementation. */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "core/mem.h"
#include "device/device.h"
#include "kernels/conv_prepare.h"
#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/conv_dnnl.h"
#include "kernels/kernel_families.h"

typedef struct conv_job {
  const rf__conv_geom *g;
  bool f64, direct; /* direct: col is the image itself */
  size_t es;
  const void *x, *w, *dy; /* the op's inputs that exist */
  void *y;                /* output */
  void *col;              /* scratch: one col a block */
  void *partial;          /* filter grad: one (K, oc) a block but block 0 */
  int64_t per;            /* images a block */
  int64_t n_blocks;
} conv_job;

static int64_t patch(const rf__conv_geom *g) { return g->kh * g->kw * g->c; }
static int64_t pixels(const rf__conv_geom *g) { return g->oh * g->ow; }

/* col (oh*ow, kh*kw*c) of image x (h, w, c). Without dilation along w a
 * window row's kw pixels lie side by side in x: one copy of kw*c elements,
 * less the part in the padding (a copy per pixel made im2col of a 1-channel
 * image cost more than its gemm). */
static void im2col(const rf__conv_geom *g, const void *x, void *col,
                   size_t es) {
  size_t px = (size_t)g->c * es;
  char *out = col;
  for (int64_t oh = 0; oh < g->oh; oh++)
    for (int64_t ow = 0; ow < g->ow; ow++) {
      int64_t w0 = ow * g->sw - g->pl;
      /* window columns [j0, j1) fall inside the image (dw == 1) */
      int64_t j0 = w0 < 0 ? -w0 : 0;
      int64_t j1 = g->w - w0 < g->kw ? g->w - w0 : g->kw;
      if (j0 > g->kw) j0 = g->kw;
      if (j1 < j0) j1 = j0;
      for (int64_t i = 0; i < g->kh; i++) {
        int64_t ih = oh * g->sh - g->pt + i * g->dh;
        if (ih < 0 || ih >= g->h) {
          memset(out, 0, px * (size_t)g->kw);
          out += px * (size_t)g->kw;
          continue;
        }
        const char *row = (const char *)x + (size_t)(ih * g->w * g->c) * es;
        if (g->dw == 1) {
          memset(out, 0, px * (size_t)j0);
          if (j1 > j0)
            memcpy(out + px * (size_t)j0, row + px * (size_t)(w0 + j0),
                   px * (size_t)(j1 - j0));
          memset(out + px * (size_t)j1, 0, px * (size_t)(g->kw - j1));
          out += px * (size_t)g->kw;
        } else {
          for (int64_t j = 0; j < g->kw; j++, out += px) {
            int64_t iw = w0 + j * g->dw;
            if (iw < 0 || iw >= g->w)
              memset(out, 0, px);
            else
              memcpy(out, row + px * (size_t)iw, px);
          }
        }
      }
    }
}

/* dx (h, w, c) = the sum of col's patches at their places (dx zeroed). */
#define DEFINE_COL2IM(NAME, T)                                             \
  static void col2im_##NAME(const rf__conv_geom *g, const T *col, T *dx) { \
    const T *in = col;                                                     \
    for (int64_t oh = 0; oh < g->oh; oh++)                                 \
      for (int64_t ow = 0; ow < g->ow; ow++)                               \
        for (int64_t i = 0; i < g->kh; i++) {                              \
          int64_t ih = oh * g->sh - g->pt + i * g->dh;                     \
          for (int64_t j = 0; j < g->kw; j++, in += g->c) {                \
            int64_t iw = ow * g->sw - g->pl + j * g->dw;                   \
            if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) continue;    \
            T *o = dx + (ih * g->w + iw) * g->c;                           \
            for (int64_t k = 0; k < g->c; k++) o[k] += in[k];              \
          }                                                                \
        }                                                                  \
  }
DEFINE_COL2IM(f32, float)
DEFINE_COL2IM(f64, double)

/* C (m, n) = op(A) op(B) + beta C, row-major, lda/ldb their row lengths. */
static void gemm(bool f64, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 const void *a, int64_t lda, const void *b, int64_t ldb,
                 double beta, void *c) {
  CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE ob = tb ? CblasTrans : CblasNoTrans;
  if (f64)
    cblas_dgemm(CblasRowMajor, oa, ob, (int)m, (int)n, (int)k, 1.0, a, (int)lda,
                b, (int)ldb, beta, c, (int)n);
  else
    cblas_sgemm(CblasRowMajor, oa, ob, (int)m, (int)n, (int)k, 1.0f, a,
                (int)lda, b, (int)ldb, (float)beta, c, (int)n);
}

/* Element `at` of base (elements of j's dtype). */
static void *elem(const conv_job *j, const void *base, int64_t at) {
  return (char *)base + (size_t)at * j->es;
}

static void *image(const conv_job *j, const void *base, int64_t img,
                   int64_t per_image) {
  return elem(j, base, img * per_image);
}

static void *col_of(const conv_job *j, int64_t blk) {
  return elem(j, j->col, blk * pixels(j->g) * patch(j->g));
}

/* Block blk's images [first, last). */
static void block_images(const conv_job *j, int64_t blk, int64_t *first,
                         int64_t *last) {
  *first = blk * j->per;
  *last = *first + j->per < j->g->n ? *first + j->per : j->g->n;
}

static void forward_blocks(void *arg, int64_t b0, int64_t b1) {
  const conv_job *j = arg;
  const rf__conv_geom *g = j->g;
  int64_t in_size = g->h * g->w * g->c, out_size = pixels(g) * g->oc;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t first, last;
    block_images(j, blk, &first, &last);
    for (int64_t n = first; n < last; n++) {
      const void *x = image(j, j->x, n, in_size);
      void *col = j->direct ? (void *)x : col_of(j, blk);
      if (!j->direct) im2col(g, x, col, j->es);
      gemm(j->f64, false, g->ohwi, pixels(g), g->oc, patch(g), col, patch(g),
           j->w, g->ohwi ? patch(g) : g->oc, 0.0, image(j, j->y, n, out_size));
    }
  }
}

static void input_grad_blocks(void *arg, int64_t b0, int64_t b1) {
  const conv_job *j = arg;
  const rf__conv_geom *g = j->g;
  int64_t in_size = g->h * g->w * g->c, out_size = pixels(g) * g->oc;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t first, last;
    block_images(j, blk, &first, &last);
    for (int64_t n = first; n < last; n++) {
      void *dx = image(j, j->y, n, in_size);
      void *col = j->direct ? dx : col_of(j, blk);
      gemm(j->f64, false, !g->ohwi, pixels(g), patch(g), g->oc,
           image(j, j->dy, n, out_size), g->oc, j->w,
           g->ohwi ? patch(g) : g->oc, 0.0, col);
      if (j->direct) continue;
      memset(dx, 0, (size_t)in_size * j->es);
      if (j->f64)
        col2im_f64(g, (const double *)col, (double *)dx);
      else
        col2im_f32(g, (const float *)col, (float *)dx);
    }
  }
}

static void filter_grad_blocks(void *arg, int64_t b0, int64_t b1) {
  const conv_job *j = arg;
  const rf__conv_geom *g = j->g;
  int64_t in_size = g->h * g->w * g->c, out_size = pixels(g) * g->oc;
  size_t dw_bytes = (size_t)(patch(g) * g->oc) * j->es;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t first, last;
    block_images(j, blk, &first, &last);
    void *dw =
        blk == 0 ? j->y : elem(j, j->partial, (blk - 1) * patch(g) * g->oc);
    memset(dw, 0, dw_bytes);
    for (int64_t n = first; n < last; n++) {
      const void *x = image(j, j->x, n, in_size);
      void *col = j->direct ? (void *)x : col_of(j, blk);
      if (!j->direct) im2col(g, x, col, j->es);
      if (g->ohwi)
        gemm(j->f64, true, false, g->oc, patch(g), pixels(g),
             image(j, j->dy, n, out_size), g->oc, col, patch(g), 1.0, dw);
      else
        gemm(j->f64, true, false, patch(g), g->oc, pixels(g), col, patch(g),
             image(j, j->dy, n, out_size), g->oc, 1.0, dw);
    }
  }
}

/* ---- kernels ---- */

/* Fills j's sizes and scratch for g; the caller frees j->col and
 * j->partial. */
static rf_status *job_make(rf__kernel_ctx *ctx, const rf__conv_geom *g,
                           rf_dtype dt, bool partials, conv_job *j) {
  memset(j, 0, sizeof *j);
  j->g = g;
  j->f64 = dt == RF_FLOAT64;
  j->es = rf_dtype_size(dt);
  j->direct = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
              g->pt == 0 && g->pl == 0 && g->oh == g->h && g->ow == g->w;
  int64_t big = pixels(g) > patch(g) ? pixels(g) : patch(g);
  if (big > INT_MAX || g->oc > INT_MAX ||
      (double)pixels(g) * (double)patch(g) > (double)INT64_MAX / 16)
    return rf__kernel_error(ctx, RF_UNIMPLEMENTED,
                            "an image's patches (%lld x %lld) are too large "
                            "for the CPU kernel's BLAS calls",
                            (long long)pixels(g), (long long)patch(g));
  int64_t threads = ctx->device && ctx->device->pool
                        ? rf__threadpool_size(ctx->device->pool)
                        : 1;
  j->n_blocks = g->n < threads ? g->n : threads;
  if (j->n_blocks < 1) j->n_blocks = 1;
  j->per = (g->n + j->n_blocks - 1) / j->n_blocks;
  if (j->per < 1) j->per = 1;
  j->n_blocks = g->n > 0 ? (g->n + j->per - 1) / j->per : 1;
  size_t col = j->direct ? 0 : (size_t)(pixels(g) * patch(g)) * j->es;
  size_t part = partials ? (size_t)(patch(g) * g->oc) * j->es : 0;
  j->col = col ? rf__malloc(col * (size_t)j->n_blocks) : NULL;
  j->partial = part && j->n_blocks > 1
                   ? rf__malloc(part * (size_t)(j->n_blocks - 1))
                   : NULL;
  if ((col && !j->col) || (part && j->n_blocks > 1 && !j->partial)) {
    rf__free(j->col);
    rf__free(j->partial);
    return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED,
                            "no memory for the convolution's scratch");
  }
  return NULL;
}

static void job_free(conv_job *j) {
  rf__free(j->col);
  rf__free(j->partial);
}

/* The op of kind on g into out, its inputs x, w, dy (NULL where it has
 * none): through oneDNN where that takes it (float32), else as blocks of
 * images on the pool; the filter gradient then adds its blocks' partial
 * sums in block order. On error ctx's outputs are dropped. */
static rf_status *conv_run(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                           const rf__conv_geom *g, rf_tensor *out,
                           const void *x, const void *w, const void *dy) {
  bool done = false;
  rf_status *st = NULL;
  if (out->dtype == RF_FLOAT32 && rf__conv_direct_fits(kind, g)) {
    st = rf__conv_direct_run(ctx, kind, g, x, w, dy, out->data);
    done = true;
  } else if (out->dtype == RF_FLOAT32)
    st = rf__conv_dnnl_run(ctx, kind, g, x, w, dy, out->data, &done);
  conv_job j;
  bool filter = kind == RF_CONV_DNNL_FILTER_GRAD;
  if (!st && !done) st = job_make(ctx, g, out->dtype, filter, &j);
  if (st) rf__kernel_drop_outputs(ctx);
  if (st || done) return st;
  j.x = x;
  j.w = w;
  j.dy = dy;
  j.y = out->data;
  void (*fn)(void *, int64_t, int64_t) =
      kind == RF_CONV_DNNL_FORWARD      ? forward_blocks
      : kind == RF_CONV_DNNL_INPUT_GRAD ? input_grad_blocks
                                        : filter_grad_blocks;
  int64_t cost = j.per * pixels(g) * patch(g) * g->oc;
  rf__kernel_parallel_for(ctx, j.n_blocks, cost > 0 ? cost : 1, fn, &j);
  int64_t m = out->num_elements;
  for (int64_t b = 1; filter && b < j.n_blocks; b++) {
    const void *p = elem(&j, j.partial, (b - 1) * m);
    if (j.f64)
      for (int64_t i = 0; i < m; i++)
        ((double *)out->data)[i] += ((const double *)p)[i];
    else
      for (int64_t i = 0; i < m; i++)
        ((float *)out->data)[i] += ((const float *)p)[i];
  }
  job_free(&j);
  return NULL;
}

static rf_status *conv2d_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0], *w = ctx->inputs[1];
  rf__conv_geom g;
  RF_CHECK(rf__conv2d_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.oh, g.ow, g.oc);
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &s, &y));
  if (y->num_elements == 0) return NULL;
  if (patch(&g) == 0) {
    memset(y->data, 0, (size_t)y->num_elements * rf_dtype_size(x->dtype));
    return NULL;
  }
  return conv_run(ctx, RF_CONV_DNNL_FORWARD, &g, y, x->data, w->data, NULL);
}

static rf_status *conv2d_backprop_input_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *w = ctx->inputs[1], *dy = ctx->inputs[2];
  rf__conv_geom g;
  RF_CHECK(rf__conv2d_backprop_input_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.h, g.w, g.c);
  rf_tensor *dx;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, w->dtype, &s, &dx));
  if (dx->num_elements == 0) return NULL;
  if (pixels(&g) == 0 || g.oc == 0) {
    memset(dx->data, 0, (size_t)dx->num_elements * rf_dtype_size(w->dtype));
    return NULL;
  }
  return conv_run(ctx, RF_CONV_DNNL_INPUT_GRAD, &g, dx, NULL, w->data,
                  dy->data);
}

static rf_status *conv2d_backprop_filter_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0], *dy = ctx->inputs[2];
  rf__conv_geom g;
  RF_CHECK(rf__conv2d_backprop_filter_prepare(ctx, &g));
  int64_t fd[4];
  rf__filter_dims(&g, fd);
  rf_shape s = rf_shape_of(4, fd[0], fd[1], fd[2], fd[3]);
  rf_tensor *dw;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &s, &dw));
  if (dw->num_elements == 0) return NULL;
  if (g.n == 0 || pixels(&g) == 0) {
    memset(dw->data, 0, (size_t)dw->num_elements * rf_dtype_size(x->dtype));
    return NULL;
  }
  return conv_run(ctx, RF_CONV_DNNL_FILTER_GRAD, &g, dw, x->data, NULL,
                  dy->data);
}

/* ---- registration ---- */

static const rf__kernel_def defs[] = {RF_CONV_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_conv_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]);
}
