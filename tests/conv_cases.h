/* tests/conv_cases.h - the convolution cases shared by test_conv_ops.c
 * and test_conv_filter_format.c, with their float64 references (filters
 * HWIO). Static: each test includes it once. */
#ifndef RF_TESTS_CONV_CASES_H
#define RF_TESTS_CONV_CASES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "ringflow/ringflow.h"
#include "testutil.h"

/* One windowed op's case: input (n, h, w, c), window kh x kw (conv: filter
 * (kh, kw, c, oc)), strides, dilations, padding. */
typedef struct wcase {
  const char *name;
  int64_t n, h, w, c, kh, kw, oc, sh, sw, dh, dw;
  bool same;
} wcase;

static const wcase conv_cases[] = {
    {"3x3 SAME", 2, 5, 6, 3, 3, 3, 4, 1, 1, 1, 1, true},
    {"3x2 VALID stride 2x1", 2, 7, 6, 2, 3, 2, 3, 2, 1, 1, 1, false},
    {"stride > window", 1, 7, 8, 2, 2, 2, 2, 3, 3, 1, 1, true},
    {"dilation 2 SAME", 1, 7, 6, 2, 3, 3, 2, 1, 1, 2, 2, true},
    {"dilation 2x3 VALID stride 2", 2, 8, 9, 1, 2, 3, 2, 2, 2, 2, 3, false},
    {"input smaller than window SAME", 1, 2, 3, 2, 5, 5, 2, 1, 1, 1, 1, true},
    {"size-1 dims", 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, true},
    {"1x1 direct", 2, 3, 3, 4, 1, 1, 2, 1, 1, 1, 1, false},
    {"1x1 stride 2", 1, 5, 5, 2, 1, 1, 3, 2, 2, 1, 1, true},
    {"batch 0", 0, 4, 4, 2, 3, 3, 2, 1, 1, 1, 1, true},
    {"stride > window VALID", 2, 9, 7, 2, 2, 1, 3, 4, 3, 1, 1, false},
    {"stride > dilated window", 1, 9, 9, 1, 2, 2, 2, 4, 5, 2, 3, true},
    {"input smaller than window SAME stride 2", 1, 3, 2, 2, 5, 4, 2, 2, 2, 1, 1,
     true},
    {"size-1 channels and batch, 1-wide", 1, 6, 1, 1, 3, 1, 1, 2, 1, 1, 1,
     true},
    /* 1x1, strided, an even input and fewer channels than oneDNN's block
     * (8 on AVX2, 16 on AVX-512): its filter gradient wrote past its
     * scratchpad (oneDNN issue #6035); ringflow must route around it */
    {"1x1 stride 2, even input, 3 channels", 2, 6, 8, 3, 1, 1, 5, 2, 2, 1, 1,
     false},
    {"1x1 stride 2, even input, 12 channels", 1, 8, 4, 12, 1, 1, 16, 2, 2, 1, 1,
     true},
};
#define NCONV ((int)(sizeof conv_cases / sizeof conv_cases[0]))

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, bool same,
                       int64_t *pad) {
  int64_t eff = (k - 1) * d + 1;
  if (!same) {
    *pad = 0;
    return in == 0 ? 0 : (in - eff) / s + 1;
  }
  int64_t o = (in + s - 1) / s, need = (o - 1) * s + eff - in;
  *pad = need > 0 ? need / 2 : 0;
  return o;
}

typedef struct geo {
  int64_t oh, ow, pt, pl;
} geo;

static geo geo_of(const wcase *c) {
  geo g;
  g.oh = out_dim(c->h, c->kh, c->sh, c->dh, c->same, &g.pt);
  g.ow = out_dim(c->w, c->kw, c->sw, c->dw, c->same, &g.pl);
  return g;
}

static double *conv_ref(const wcase *c, const double *x, const double *f) {
  geo g = geo_of(c);
  double *y = calloc((size_t)(c->n * g.oh * g.ow * c->oc) + 1, sizeof *y);
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t oh = 0; oh < g.oh; oh++)
      for (int64_t ow = 0; ow < g.ow; ow++)
        for (int64_t o = 0; o < c->oc; o++) {
          double s = 0;
          for (int64_t i = 0; i < c->kh; i++)
            for (int64_t j = 0; j < c->kw; j++) {
              int64_t ih = oh * c->sh - g.pt + i * c->dh;
              int64_t iw = ow * c->sw - g.pl + j * c->dw;
              if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
              for (int64_t k = 0; k < c->c; k++)
                s += x[((n * c->h + ih) * c->w + iw) * c->c + k] *
                     f[((i * c->kw + j) * c->c + k) * c->oc + o];
            }
          y[((n * g.oh + oh) * g.ow + ow) * c->oc + o] = s;
        }
  return y;
}

static double *input_grad_ref(const wcase *c, const double *f,
                              const double *dy) {
  geo g = geo_of(c);
  double *dx = calloc((size_t)(c->n * c->h * c->w * c->c) + 1, sizeof *dx);
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t oh = 0; oh < g.oh; oh++)
      for (int64_t ow = 0; ow < g.ow; ow++)
        for (int64_t i = 0; i < c->kh; i++)
          for (int64_t j = 0; j < c->kw; j++) {
            int64_t ih = oh * c->sh - g.pt + i * c->dh;
            int64_t iw = ow * c->sw - g.pl + j * c->dw;
            if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
            for (int64_t k = 0; k < c->c; k++)
              for (int64_t o = 0; o < c->oc; o++)
                dx[((n * c->h + ih) * c->w + iw) * c->c + k] +=
                    dy[((n * g.oh + oh) * g.ow + ow) * c->oc + o] *
                    f[((i * c->kw + j) * c->c + k) * c->oc + o];
          }
  return dx;
}

static double *filter_grad_ref(const wcase *c, const double *x,
                               const double *dy) {
  geo g = geo_of(c);
  double *dw = calloc((size_t)(c->kh * c->kw * c->c * c->oc) + 1, sizeof *dw);
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t oh = 0; oh < g.oh; oh++)
      for (int64_t ow = 0; ow < g.ow; ow++)
        for (int64_t i = 0; i < c->kh; i++)
          for (int64_t j = 0; j < c->kw; j++) {
            int64_t ih = oh * c->sh - g.pt + i * c->dh;
            int64_t iw = ow * c->sw - g.pl + j * c->dw;
            if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
            for (int64_t k = 0; k < c->c; k++)
              for (int64_t o = 0; o < c->oc; o++)
                dw[((i * c->kw + j) * c->c + k) * c->oc + o] +=
                    x[((n * c->h + ih) * c->w + iw) * c->c + k] *
                    dy[((n * g.oh + oh) * g.ow + ow) * c->oc + o];
          }
  return dw;
}

/* Shapes oneDNN's direct kernels take (channels of 16 and more, the CNN's
 * layers), with batches that split unevenly over the pool's threads (the
 * last block has its own primitive). */
static const wcase f32_cases[] = {
    {"CNN layer 1 batch 5", 5, 12, 12, 1, 5, 5, 32, 1, 1, 1, 1, true},
    {"CNN layer 2 batch 7", 7, 7, 7, 32, 5, 5, 64, 1, 1, 1, 1, true},
    {"16 ch stride 2 VALID", 3, 9, 8, 16, 3, 3, 16, 2, 2, 1, 1, false},
    {"16 ch dilation 2 SAME", 4, 8, 8, 16, 3, 3, 32, 1, 1, 2, 2, true},
    /* 16 or more channels at stride 1: the input gradient runs as a
     * forward convolution of dy with the flipped filter (conv_dnnl.c);
     * padding after > before, windows wider than the input, dilation */
    {"16 ch 4x3 SAME", 3, 6, 7, 16, 4, 3, 8, 1, 1, 1, 1, true},
    {"16 ch input smaller than window SAME", 2, 2, 3, 16, 5, 5, 4, 1, 1, 1, 1,
     true},
    {"24 ch 3x2 VALID dilation 1x2", 2, 7, 9, 24, 3, 2, 5, 1, 1, 1, 2, false},
    /* fewer than 8 channels: conv_dnnl.c takes oneDNN's jit forward over
     * its first choice; 7 images leave a last block of another size on 2
     * and 3 threads */
    {"CNN layer 1 28x28 batch 7", 7, 28, 28, 1, 5, 5, 32, 1, 1, 1, 1, true},
    {"3 ch stride 2 dilation 2", 5, 11, 10, 3, 3, 3, 16, 2, 2, 2, 2, true},
};

static rf_shape x_shape(const wcase *c) {
  return rf_shape_of(4, c->n, c->h, c->w, c->c);
}
static rf_shape f_shape(const wcase *c) {
  return rf_shape_of(4, c->kh, c->kw, c->c, c->oc);
}
static rf_shape y_shape(const wcase *c, bool pool) {
  geo g = geo_of(c);
  return rf_shape_of(4, c->n, g.oh, g.ow, pool ? c->c : c->oc);
}

/* s (4 dims) as an int32 Const: a backprop op's sizes input. */
static rf_output sizes_const(rf_graph *g, rf_shape s) {
  int32_t d[4];
  for (int i = 0; i < 4; i++) d[i] = (int32_t)s.dims[i];
  rf_shape v = rf_shape_of(1, (int64_t)4);
  rf_tensor *t;
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, d, &t));
  rf_output o = rf_const(g, NULL, t);
  rf_tensor_release(t);
  return o;
}

#endif
