/* kernels/cpu/pool.c - MaxPool, AvgPool and their gradients on the CPU
 * (NHWC). A window's padded positions take no part: MaxPool takes the
 * largest input element in it (NaN when one is NaN), AvgPool divides by the
 * count of input elements in it. MaxPoolGrad sends each output's gradient to
 * the first maximum of its window in (row, column) order, found again from
 * the input; the GPU kernels pick the same one. Forward passes split output
 * rows over the pool; gradients split images (their scatters stay inside an
 * image), so every result is the same whatever the thread count. */
#include <stdbool.h>
#include <string.h>

#include "kernels/conv_prepare.h"
#include "kernels/cpu/max_pool_grad_disjoint.h"
#include "kernels/kernel_families.h"

typedef struct pool_job {
  const rf__conv_geom *g;
  const void *x, *y, *dy; /* inputs that exist */
  void *out;
} pool_job;

/* Window [h0, h1) x [w0, w1) of output (oh, ow), clipped to the input. */
static void window(const rf__conv_geom *g, int64_t oh, int64_t ow, int64_t *h0,
                   int64_t *h1, int64_t *w0, int64_t *w1) {
  int64_t hs = oh * g->sh - g->pt, ws = ow * g->sw - g->pl;
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = hs + g->kh < g->h ? hs + g->kh : g->h;
  *w1 = ws + g->kw < g->w ? ws + g->kw : g->w;
}

/* The windows are walked with the channels innermost, CH at a time, so
 * the loops over channels read contiguous memory and vectorise (a walk per
 * channel, as before, read one element per window position: pooling took
 * 11% of a CNN training step's CPU time). max_##NAME keeps the running maximum:
 * an element replaces it when larger or NaN, unless it is NaN already. */
#define CH 64
#define DEFINE_POOL(NAME, T)                                                   \
  /* m[k] = the maximum of output (oh, ow)'s window for channels k0 + k, k <   \
   * kn; false for an empty window. */                                         \
  static bool max_##NAME(const rf__conv_geom *g, const T *x, int64_t oh,       \
                         int64_t ow, int64_t k0, int64_t kn, T *m) {           \
    int64_t h0, h1, w0, w1;                                                    \
    window(g, oh, ow, &h0, &h1, &w0, &w1);                                     \
    if (h0 >= h1 || w0 >= w1) return false;                                    \
    const T *v = x + (h0 * g->w + w0) * g->c + k0;                             \
    for (int64_t k = 0; k < kn; k++) m[k] = v[k];                              \
    for (int64_t ih = h0; ih < h1; ih++)                                       \
      for (int64_t iw = ih == h0 ? w0 + 1 : w0; iw < w1; iw++) {               \
        v = x + (ih * g->w + iw) * g->c + k0;                                  \
        for (int64_t k = 0; k < kn; k++) {                                     \
          T a = m[k], b = v[k];                                                \
          m[k] = a == a && (b > a || b != b) ? b : a;                          \
        }                                                                      \
      }                                                                        \
    return true;                                                               \
  }                                                                            \
  /* As max_##NAME, and at[k] = the place in the window (row-major, as T) of   \
   * the element max_##NAME takes last: the first maximum, or the first NaN.   \
   * Selects on T-wide values only: the loop vectorises. */                    \
  static bool argmax_##NAME(const rf__conv_geom *g, const T *x, int64_t oh,    \
                            int64_t ow, int64_t k0, int64_t kn, T *m, T *at) { \
    int64_t h0, h1, w0, w1;                                                    \
    window(g, oh, ow, &h0, &h1, &w0, &w1);                                     \
    if (h0 >= h1 || w0 >= w1) return false;                                    \
    const T *v = x + (h0 * g->w + w0) * g->c + k0;                             \
    for (int64_t k = 0; k < kn; k++) m[k] = v[k], at[k] = 0;                   \
    T p = 0;                                                                   \
    for (int64_t ih = h0; ih < h1; ih++)                                       \
      for (int64_t iw = ih == h0 ? w0 + 1 : w0; iw < w1; iw++) {               \
        v = x + (ih * g->w + iw) * g->c + k0;                                  \
        p += 1;                                                                \
        for (int64_t k = 0; k < kn; k++) {                                     \
          T a = m[k], b = v[k];                                                \
          bool take = a == a && (b > a || b != b);                             \
          m[k] = take ? b : a;                                                 \
          at[k] = take ? p : at[k];                                            \
        }                                                                      \
      }                                                                        \
    return true;                                                               \
  }                                                                            \
  /* rows r = (n, oh) of the output */                                         \
  static void max_rows_##NAME(void *arg, int64_t r0, int64_t r1) {             \
    const pool_job *j = arg;                                                   \
    const rf__conv_geom *g = j->g;                                             \
    for (int64_t r = r0; r < r1; r++) {                                        \
      int64_t n = r / g->oh, oh = r % g->oh;                                   \
      const T *x = (const T *)j->x + n * g->h * g->w * g->c;                   \
      T *y = (T *)j->out + r * g->ow * g->c;                                   \
      for (int64_t ow = 0; ow < g->ow; ow++)                                   \
        for (int64_t k0 = 0; k0 < g->c; k0 += CH) {                            \
          int64_t kn = g->c - k0 < CH ? g->c - k0 : CH;                        \
          T *o = y + ow * g->c + k0;                                           \
          if (!max_##NAME(g, x, oh, ow, k0, kn, o))                            \
            for (int64_t k = 0; k < kn; k++) o[k] = 0;                         \
        }                                                                      \
    }                                                                          \
  }                                                                            \
  /* Each output's gradient goes to the element argmax_##NAME finds (the       \
   * first maximum, or the first NaN). Window places are counted in T, exact   \
   * up to 2^24 for float; a larger window finds the same element as the       \
   * first one equal to the maximum (rest[k]: 1 until channel k's gradient is  \
   * placed), which GCC vectorises less well. Selects on T-wide values, every  \
   * operand read on every path, let GCC vectorise the loops. */               \
  static void max_grad_images_##NAME(void *arg, int64_t n0, int64_t n1) {      \
    const pool_job *j = arg;                                                   \
    const rf__conv_geom *g = j->g;                                             \
    int64_t in = g->h * g->w * g->c, out = g->oh * g->ow * g->c;               \
    bool by_place = g->kh * g->kw <= ((int64_t)1 << 24);                       \
    T m[CH], at[CH];                                                           \
    for (int64_t n = n0; n < n1; n++) {                                        \
      const T *x = (const T *)j->x + n * in, *dy = (const T *)j->dy + n * out; \
      T *dx = (T *)j->out + n * in;                                            \
      memset(dx, 0, sizeof(T) * (size_t)in);                                   \
      for (int64_t oh = 0; oh < g->oh; oh++)                                   \
        for (int64_t ow = 0; ow < g->ow; ow++)                                 \
          for (int64_t k0 = 0; k0 < g->c; k0 += CH) {                          \
            int64_t kn = g->c - k0 < CH ? g->c - k0 : CH;                      \
            bool some = by_place ? argmax_##NAME(g, x, oh, ow, k0, kn, m, at)  \
                                 : max_##NAME(g, x, oh, ow, k0, kn, m);        \
            if (!some) continue;                                               \
            const T *d = dy + (oh * g->ow + ow) * g->c + k0;                   \
            int64_t h0, h1, w0, w1;                                            \
            window(g, oh, ow, &h0, &h1, &w0, &w1);                             \
            T p = 0;                                                           \
            if (!by_place)                                                     \
              for (int64_t k = 0; k < kn; k++) at[k] = 1;                      \
            for (int64_t ih = h0; ih < h1; ih++)                               \
              for (int64_t iw = w0; iw < w1; iw++, p += 1) {                   \
                const T *v = x + (ih * g->w + iw) * g->c + k0;                 \
                T *o = dx + (ih * g->w + iw) * g->c + k0;                      \
                if (by_place) {                                                \
                  for (int64_t k = 0; k < kn; k++) {                           \
                    T dk = d[k];                                               \
                    o[k] += at[k] == p ? dk : (T)0;                            \
                  }                                                            \
                  continue;                                                    \
                }                                                              \
                for (int64_t k = 0; k < kn; k++) {                             \
                  T a = m[k], b = v[k], dk = d[k], r = at[k];                  \
                  bool hit = r != 0 && (b == a || (a != a && b != b));         \
                  o[k] += hit ? dk : (T)0;                                     \
                  at[k] = hit ? (T)0 : r;                                      \
                }                                                              \
              }                                                                \
          }                                                                    \
    }                                                                          \
  }                                                                            \
  static void avg_rows_##NAME(void *arg, int64_t r0, int64_t r1) {             \
    const pool_job *j = arg;                                                   \
    const rf__conv_geom *g = j->g;                                             \
    for (int64_t r = r0; r < r1; r++) {                                        \
      int64_t n = r / g->oh, oh = r % g->oh;                                   \
      const T *x = (const T *)j->x + n * g->h * g->w * g->c;                   \
      T *y = (T *)j->out + r * g->ow * g->c;                                   \
      for (int64_t ow = 0; ow < g->ow; ow++) {                                 \
        int64_t h0, h1, w0, w1;                                                \
        window(g, oh, ow, &h0, &h1, &w0, &w1);                                 \
        T *o = y + ow * g->c;                                                  \
        for (int64_t k = 0; k < g->c; k++) o[k] = 0;                           \
        for (int64_t ih = h0; ih < h1; ih++)                                   \
          for (int64_t iw = w0; iw < w1; iw++)                                 \
            for (int64_t k = 0; k < g->c; k++)                                 \
              o[k] += x[(ih * g->w + iw) * g->c + k];                          \
        int64_t cnt = (h1 - h0) * (w1 - w0);                                   \
        for (int64_t k = 0; k < g->c && cnt > 0; k++) o[k] /= (T)cnt;          \
      }                                                                        \
    }                                                                          \
  }                                                                            \
  static void avg_grad_images_##NAME(void *arg, int64_t n0, int64_t n1) {      \
    const pool_job *j = arg;                                                   \
    const rf__conv_geom *g = j->g;                                             \
    int64_t in = g->h * g->w * g->c, out = g->oh * g->ow * g->c;               \
    for (int64_t n = n0; n < n1; n++) {                                        \
      const T *dy = (const T *)j->dy + n * out;                                \
      T *dx = (T *)j->out + n * in;                                            \
      memset(dx, 0, sizeof(T) * (size_t)in);                                   \
      for (int64_t oh = 0; oh < g->oh; oh++)                                   \
        for (int64_t ow = 0; ow < g->ow; ow++) {                               \
          int64_t h0, h1, w0, w1;                                              \
          window(g, oh, ow, &h0, &h1, &w0, &w1);                               \
          int64_t cnt = (h1 - h0) * (w1 - w0);                                 \
          const T *d = dy + (oh * g->ow + ow) * g->c;                          \
          for (int64_t ih = h0; ih < h1; ih++)                                 \
            for (int64_t iw = w0; iw < w1; iw++)                               \
              for (int64_t k = 0; k < g->c; k++)                               \
                dx[(ih * g->w + iw) * g->c + k] += d[k] / (T)cnt;              \
        }                                                                      \
    }                                                                          \
  }
DEFINE_POOL(f32, float)
DEFINE_POOL(f64, double)

/* ---- kernels ---- */

typedef void (*part_fn)(void *, int64_t, int64_t);

/* Output `shape` of x's dtype; runs fn over `items` (rows or images). */
static rf_status *run(rf__kernel_ctx *ctx, const rf__conv_geom *g,
                      const rf_shape *shape, pool_job *j, int64_t items,
                      int64_t cost, part_fn f32, part_fn f64) {
  rf_dtype dt = ctx->inputs[ctx->num_inputs - 1]->dtype;
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, dt, shape, &out));
  j->g = g;
  j->out = out->data;
  if (out->num_elements == 0 || items == 0) return NULL;
  rf__kernel_parallel_for(ctx, items, cost > 0 ? cost : 1,
                          dt == RF_FLOAT64 ? f64 : f32, j);
  return NULL;
}

static rf_status *max_pool_compute(rf__kernel_ctx *ctx) {
  rf__conv_geom g;
  RF_CHECK(rf__pool_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.oh, g.ow, g.c);
  pool_job j = {.x = ctx->inputs[0]->data};
  return run(ctx, &g, &s, &j, g.n * g.oh, g.ow * g.c * g.kh * g.kw,
             max_rows_f32, max_rows_f64);
}

static rf_status *avg_pool_compute(rf__kernel_ctx *ctx) {
  rf__conv_geom g;
  RF_CHECK(rf__pool_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.oh, g.ow, g.c);
  pool_job j = {.x = ctx->inputs[0]->data};
  return run(ctx, &g, &s, &j, g.n * g.oh, g.ow * g.c * g.kh * g.kw,
             avg_rows_f32, avg_rows_f64);
}

/* float32 images whose windows do not overlap (max_pool_grad_disjoint.c) */
static void max_grad_disjoint_images(void *arg, int64_t n0, int64_t n1) {
  const pool_job *j = arg;
  const rf__conv_geom *g = j->g;
  int64_t in = g->h * g->w * g->c, out = g->oh * g->ow * g->c;
  for (int64_t n = n0; n < n1; n++)
    rf__max_pool_grad_disjoint(g, (const float *)j->x + n * in,
                               (const float *)j->dy + n * out,
                               (float *)j->out + n * in);
}

static rf_status *max_pool_grad_compute(rf__kernel_ctx *ctx) {
  rf__conv_geom g;
  RF_CHECK(rf__max_pool_grad_prepare(ctx, &g));
  rf_shape s = ctx->inputs[0]->shape;
  pool_job j = {.x = ctx->inputs[0]->data, .dy = ctx->inputs[2]->data};
  part_fn f32 = rf__max_pool_grad_disjoint_fits(&g) ? max_grad_disjoint_images
                                                    : max_grad_images_f32;
  return run(ctx, &g, &s, &j, g.n, g.oh * g.ow * g.c * g.kh * g.kw, f32,
             max_grad_images_f64);
}

static rf_status *avg_pool_grad_compute(rf__kernel_ctx *ctx) {
  rf__conv_geom g;
  RF_CHECK(rf__avg_pool_grad_prepare(ctx, &g));
  rf_shape s = rf_shape_of(4, g.n, g.h, g.w, g.c);
  pool_job j = {.dy = ctx->inputs[1]->data};
  return run(ctx, &g, &s, &j, g.n, g.oh * g.ow * g.c * g.kh * g.kw,
             avg_grad_images_f32, avg_grad_images_f64);
}

/* ---- registration ---- */

static const rf__kernel_def defs[] = {RF_POOL_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_pool_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]);
}
