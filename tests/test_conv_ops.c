/* tests/test_conv_ops.c - Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter,
 * MaxPool, AvgPool and their gradients (NHWC), run through sessions: outputs
 * against float64 references computed here (float32 and float64), gradients
 * built by rf_gradients against central finite differences in float64, on
 * edge cases (size-1 dims, an input smaller than the window with SAME
 * padding (more padding than input), stride > window with SAME and VALID
 * and with dilation, dilation > 1, batch 0, 1x1 windows, 1x1 strided on
 * an even input with few channels), and every
 * error at build and at run time naming the node and op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/graph_io.h"
#include "conv_cases.h"
#include "fault_sweep.h"
#include "testutil.h"

static const wcase pool_cases[] = {
    {"3x3 stride 2 SAME", 2, 5, 5, 2, 3, 3, 0, 2, 2, 1, 1, true},
    {"2x2 stride 2 VALID", 1, 6, 5, 3, 2, 2, 0, 2, 2, 1, 1, false},
    {"3x3 stride 1 SAME", 1, 4, 5, 2, 3, 3, 0, 1, 1, 1, 1, true},
    {"stride > window", 1, 8, 7, 1, 2, 2, 0, 3, 3, 1, 1, true},
    {"input smaller than window SAME", 1, 2, 2, 2, 5, 4, 0, 1, 1, 1, 1, true},
    {"size-1 dims", 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, false},
    {"batch 0", 0, 4, 4, 2, 2, 2, 0, 2, 2, 1, 1, true},
    {"stride > window VALID", 2, 9, 7, 2, 2, 1, 0, 4, 3, 1, 1, false},
    {"input smaller than window SAME stride 3", 1, 2, 3, 1, 5, 5, 0, 3, 3, 1, 1,
     true},
    {"1-wide, size-1 channels", 1, 5, 1, 1, 3, 1, 0, 2, 1, 1, 1, true},
};
#define NPOOL ((int)(sizeof pool_cases / sizeof pool_cases[0]))

/* ---- references (float64) ---- */

static double *pool_ref(const wcase *c, const double *x, bool max) {
  geo g = geo_of(c);
  double *y = calloc((size_t)(c->n * g.oh * g.ow * c->c) + 1, sizeof *y);
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t oh = 0; oh < g.oh; oh++)
      for (int64_t ow = 0; ow < g.ow; ow++)
        for (int64_t k = 0; k < c->c; k++) {
          double s = max ? -INFINITY : 0;
          int cnt = 0;
          for (int64_t i = 0; i < c->kh; i++)
            for (int64_t j = 0; j < c->kw; j++) {
              int64_t ih = oh * c->sh - g.pt + i, iw = ow * c->sw - g.pl + j;
              if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
              double v = x[((n * c->h + ih) * c->w + iw) * c->c + k];
              s = max ? fmax(s, v) : s + v;
              cnt++;
            }
          y[((n * g.oh + oh) * g.ow + ow) * c->c + k] = max ? s : s / cnt;
        }
  return y;
}

/* ---- builders ---- */

static rf_output conv(rf_graph *g, const wcase *c, rf_output x, rf_output f) {
  int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
  return rf_conv2d(g, NULL, x, f, s, c->same ? "SAME" : "VALID", d);
}

static rf_output pool(rf_graph *g, const wcase *c, rf_output x, bool max) {
  int64_t k[4] = {1, c->kh, c->kw, 1}, s[4] = {1, c->sh, c->sw, 1};
  const char *p = c->same ? "SAME" : "VALID";
  return max ? rf_max_pool(g, NULL, x, k, s, p)
             : rf_avg_pool(g, NULL, x, k, s, p);
}

/* ---- forward against the references ---- */

static void test_conv2d_forward(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NCONV; k++) {
      const wcase *c = &conv_cases[k];
      rf_tensor *x = rf_test_random_tensor(&rng, dts[d], x_shape(c), -1, 1);
      rf_tensor *f = rf_test_random_tensor(&rng, dts[d], f_shape(c), -1, 1);
      rf_graph *g = rf_graph_new();
      rf_output xp = rf_placeholder(g, "x", dts[d], x_shape(c));
      rf_output fp = rf_placeholder(g, "f", dts[d], f_shape(c));
      rf_output y = conv(g, c, xp, fp);
      assert_graph_ok(g);
      rf_shape built = rf_output_shape(y), want_shape = y_shape(c, false);
      assert_true(rf_shape_equal(&built, &want_shape));
      rf_feed feeds[2] = {{xp, x}, {fp, f}};
      rf_tensor *out;
      rf_test_run(g, 1, feeds, 2, &y, 1, &out);
      double *xd = rf_test_to_doubles(x), *fd = rf_test_to_doubles(f);
      double *want = conv_ref(c, xd, fd);
      print_message("Conv2D %s %s\n", c->name, rf_dtype_name(dts[d]));
      assert_tensor_near(out, want_shape, want,
                         dts[d] == RF_FLOAT32 ? 1e-5 : 1e-12);
      free(xd), free(fd), free(want);
      rf_tensor_release(out), rf_tensor_release(x), rf_tensor_release(f);
      rf_graph_free(g);
    }
}

/* Conv2D and its two gradient ops in float32, on 1, 2 and 3 pool threads,
 * against float64 references; then run again in the same session (the
 * cached primitives, fresh data). */
static void test_conv2d_float32_all_paths(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(11);
  int ncase = NCONV + (int)(sizeof f32_cases / sizeof f32_cases[0]);
  for (int threads = 1; threads <= 3; threads++)
    for (int k = 0; k < ncase; k++) {
      const wcase *c = k < NCONV ? &conv_cases[k] : &f32_cases[k - NCONV];
      rf_graph *g = rf_graph_new();
      rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
      rf_output fp = rf_placeholder(g, "f", RF_FLOAT32, f_shape(c));
      rf_output dp = rf_placeholder(g, "dy", RF_FLOAT32, y_shape(c, false));
      int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
      const char *pad = c->same ? "SAME" : "VALID";
      rf_output outs[3] = {
          conv(g, c, xp, fp),
          rf_conv2d_backprop_input(g, "bpi", sizes_const(g, x_shape(c)), fp, dp,
                                   s, pad, d),
          rf_conv2d_backprop_filter(g, "bpf", xp, sizes_const(g, f_shape(c)),
                                    dp, s, pad, d)};
      assert_graph_ok(g);
      rf_session *sess = rf_test_threads_session(g, 1, threads);
      for (int rep = 0; rep < 2; rep++) {
        rf_tensor *x =
            rf_test_random_tensor(&rng, RF_FLOAT32, x_shape(c), -1, 1);
        rf_tensor *f =
            rf_test_random_tensor(&rng, RF_FLOAT32, f_shape(c), -1, 1);
        rf_tensor *dy =
            rf_test_random_tensor(&rng, RF_FLOAT32, y_shape(c, false), -1, 1);
        rf_feed feeds[3] = {{xp, x}, {fp, f}, {dp, dy}};
        rf_tensor *got[3];
        assert_ok(rf_session_run(sess, feeds, 3, outs, 3, NULL, 0, got));
        double *xd = rf_test_to_doubles(x), *fd = rf_test_to_doubles(f);
        double *dyd = rf_test_to_doubles(dy);
        double *want[3] = {conv_ref(c, xd, fd), input_grad_ref(c, fd, dyd),
                           filter_grad_ref(c, xd, dyd)};
        rf_shape shapes[3] = {y_shape(c, false), x_shape(c), f_shape(c)};
        print_message("float32 conv %s, %d threads\n", c->name, threads);
        /* float32 sums of `terms` products in oneDNN's order: the error
         * grows with the count of terms */
        geo gg = geo_of(c);
        double terms[3] = {(double)(c->kh * c->kw * c->c),
                           (double)(c->kh * c->kw * c->oc),
                           (double)(c->n * gg.oh * gg.ow)};
        for (int i = 0; i < 3; i++) {
          double tol = 1e-7 * terms[i] > 1e-5 ? 1e-7 * terms[i] : 1e-5;
          assert_tensor_near(got[i], shapes[i], want[i], tol);
          rf_tensor_release(got[i]);
          free(want[i]);
        }
        free(xd), free(fd), free(dyd);
        rf_tensor_release(x), rf_tensor_release(f), rf_tensor_release(dy);
      }
      rf_session_free(sess);
      rf_graph_free(g);
    }
}

static void test_pool_forward(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(2);
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NPOOL; k++)
      for (int max = 0; max < 2; max++) {
        const wcase *c = &pool_cases[k];
        rf_tensor *x = rf_test_random_tensor(&rng, dts[d], x_shape(c), -1, 1);
        rf_graph *g = rf_graph_new();
        rf_output xp = rf_placeholder(g, "x", dts[d], x_shape(c));
        rf_output y = pool(g, c, xp, max);
        assert_graph_ok(g);
        rf_shape built = rf_output_shape(y), want_shape = y_shape(c, true);
        assert_true(rf_shape_equal(&built, &want_shape));
        rf_feed feed = {xp, x};
        rf_tensor *out;
        rf_test_run(g, 1, &feed, 1, &y, 1, &out);
        double *xd = rf_test_to_doubles(x);
        double *want = pool_ref(c, xd, max);
        print_message("%s %s %s\n", max ? "MaxPool" : "AvgPool", c->name,
                      rf_dtype_name(dts[d]));
        assert_tensor_near(out, want_shape, want,
                           dts[d] == RF_FLOAT32 ? 1e-6 : 1e-14);
        free(xd), free(want);
        rf_tensor_release(out), rf_tensor_release(x);
        rf_graph_free(g);
      }
}

/* MaxPool passes NaN through, as the CPU and GPU kernels document. */
static void test_max_pool_nan(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(4, 1, 2, 2, 1);
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, s);
  int64_t k[4] = {1, 2, 2, 1};
  rf_output y = rf_max_pool(g, "p", xp, k, k, "VALID");
  float v[4] = {1, NAN, 3, 2};
  rf_tensor *x;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, v, &x));
  rf_feed feed = {xp, x};
  rf_tensor *out;
  rf_test_run(g, 1, &feed, 1, &y, 1, &out);
  assert_true(isnan(rf_tensor_get(out, 0)));
  rf_tensor_release(out), rf_tensor_release(x);
  rf_graph_free(g);
}

/* MaxPoolGrad with ties and NaNs: each output's gradient goes to the first
 * maximum of its window in (row, column) order, the first NaN when the
 * window holds one, as the kernels document. Overlapping windows over more
 * channels than the CPU kernel handles at once (70), and windows that do
 * not overlap (the float32 kernel of max_pool_grad_disjoint.c): tiling the
 * input exactly, with padding before, with a stride above the window and a
 * VALID remainder (elements of no window), channels not a multiple of 16. */
static const wcase tie_cases[] = {
    {"overlapping", 2, 5, 6, 70, 3, 3, 0, 2, 2, 1, 1, true},
    {"2x2 stride 2 (the CNN's)", 3, 8, 6, 32, 2, 2, 0, 2, 2, 1, 1, true},
    {"3x3 stride 3 SAME, padded", 2, 7, 8, 20, 3, 3, 0, 3, 3, 1, 1, true},
    {"2x2 stride 3 VALID", 2, 9, 8, 17, 2, 2, 0, 3, 3, 1, 1, false},
    {"2x3 stride 2x3 VALID remainder", 1, 5, 7, 3, 2, 3, 0, 2, 3, 1, 1, false},
};

static void check_max_pool_grad_ties(const wcase *cp) {
  const wcase c = *cp;
  geo ge = geo_of(&c);
  rf_shape xs = x_shape(&c), ys = y_shape(&c, true);
  int64_t nx = c.n * c.h * c.w * c.c, ny = c.n * ge.oh * ge.ow * c.c;
  uint64_t rng = rf_test_rng(7);
  float *xv = malloc(sizeof *xv * (size_t)nx);
  for (int64_t i = 0; i < nx; i++) { /* values 0..2, about 1 in 40 NaN */
    uint64_t r = rf_test_rand(&rng) % 120;
    xv[i] = r < 3 ? NAN : (float)(r % 3);
  }
  rf_tensor *x, *dy = rf_test_random_tensor(&rng, RF_FLOAT32, ys, -1, 1);
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &xs, xv, &x));
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, xs);
  rf_output dyp = rf_placeholder(g, "dy", RF_FLOAT32, ys);
  rf_output y = pool(g, &c, xp, true), dx;
  assert_ok(rf_gradients(g, &y, 1, &xp, 1, &dyp, &dx));
  assert_graph_ok(g);
  rf_feed feeds[2] = {{xp, x}, {dyp, dy}};
  rf_output fetch[2] = {y, dx};
  rf_tensor *out[2];
  rf_test_run(g, 1, feeds, 2, fetch, 2, out);
  double *d = rf_test_to_doubles(dy);
  double *want_y = calloc((size_t)ny, sizeof *want_y);
  double *want_dx = calloc((size_t)nx, sizeof *want_dx);
  for (int64_t n = 0; n < c.n; n++)
    for (int64_t oh = 0; oh < ge.oh; oh++)
      for (int64_t ow = 0; ow < ge.ow; ow++)
        for (int64_t k = 0; k < c.c; k++) {
          int64_t best = -1;
          for (int64_t i = 0; i < c.kh; i++)
            for (int64_t j = 0; j < c.kw; j++) {
              int64_t ih = oh * c.sh - ge.pt + i, iw = ow * c.sw - ge.pl + j;
              if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
              int64_t at = ((n * c.h + ih) * c.w + iw) * c.c + k;
              if (best < 0 ||
                  (!isnan(xv[best]) && (xv[at] > xv[best] || isnan(xv[at]))))
                best = at;
            }
          int64_t o = ((n * ge.oh + oh) * ge.ow + ow) * c.c + k;
          want_y[o] = xv[best];
          want_dx[best] += d[o];
        }
  for (int64_t i = 0; i < ny; i++) {
    double got = rf_tensor_get(out[0], i);
    if (isnan(want_y[i]))
      assert_true(isnan(got));
    else
      assert_true(got == want_y[i]);
  }
  assert_tensor_near(out[1], xs, want_dx, 1e-6);
  free(xv), free(d), free(want_y), free(want_dx);
  rf_tensor_release(out[0]), rf_tensor_release(out[1]);
  rf_tensor_release(x), rf_tensor_release(dy);
  rf_graph_free(g);
}

static void test_max_pool_grad_ties(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof tie_cases / sizeof tie_cases[0]; i++)
    check_max_pool_grad_ties(&tie_cases[i]);
}

/* ---- gradients against finite differences ---- */

enum { F_CONV, F_MAX, F_AVG, F_BP_INPUT, F_BP_FILTER, F_AVG_GRAD };

/* f(x[0..nx)) of kind on case c. */
static rf_output build_f(rf_graph *g, int kind, const wcase *c,
                         const rf_output *x) {
  int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
  int64_t k[4] = {1, c->kh, c->kw, 1};
  const char *p = c->same ? "SAME" : "VALID";
  switch (kind) {
    case F_CONV: return conv(g, c, x[0], x[1]);
    case F_MAX: return pool(g, c, x[0], true);
    case F_AVG: return pool(g, c, x[0], false);
    case F_BP_INPUT: /* (filter, out_backprop) */
      return rf_conv2d_backprop_input(g, "bpi", sizes_const(g, x_shape(c)),
                                      x[0], x[1], s, p, d);
    case F_BP_FILTER: /* (input, out_backprop) */
      return rf_conv2d_backprop_filter(
          g, "bpf", x[0], sizes_const(g, f_shape(c)), x[1], s, p, d);
    default: { /* AvgPoolGrad(grad) */
      rf_node_builder *b = rf_node_builder_new(g, "AvgPoolGrad", "apg");
      rf_node_builder_input(b, sizes_const(g, x_shape(c)));
      rf_node_builder_input(b, x[0]);
      rf_node_builder_attr_dtype(b, "T", RF_FLOAT64);
      rf_node_builder_attr_int_list(b, "ksize", k, 4);
      rf_node_builder_attr_int_list(b, "strides", s, 4);
      rf_node_builder_attr_string(b, "padding", p);
      rf_node *node = NULL;
      assert_ok(rf_node_builder_finish(b, &node));
      return (rf_output){node, 0};
    }
  }
}

static int inputs_of(int kind, const wcase *c, rf_shape *shapes) {
  switch (kind) {
    case F_CONV: shapes[0] = x_shape(c), shapes[1] = f_shape(c); return 2;
    case F_MAX:
    case F_AVG: shapes[0] = x_shape(c); return 1;
    case F_BP_INPUT:
      shapes[0] = f_shape(c), shapes[1] = y_shape(c, false);
      return 2;
    case F_BP_FILTER:
      shapes[0] = x_shape(c), shapes[1] = y_shape(c, false);
      return 2;
    default: shapes[0] = y_shape(c, true); return 1;
  }
}

static double run_scalar(rf_session *s, rf_feed *feeds, int n, rf_output y) {
  rf_tensor *v = NULL;
  assert_ok(rf_session_run(s, feeds, n, &y, 1, NULL, 0, &v));
  double r = rf_tensor_get(v, 0);
  rf_tensor_release(v);
  return r;
}

/* d sum(f(x) * r) / dx_j from rf_gradients against central differences;
 * `unknown`: placeholders of unknown shape (run-time shape paths). */
static void check_fd(int kind, const wcase *c, bool unknown, uint64_t *rng) {
  rf_shape shapes[2];
  int nx = inputs_of(kind, c, shapes);
  rf_graph *g = rf_graph_new();
  rf_output x[2], dx[2];
  rf_feed feeds[2];
  for (int j = 0; j < nx; j++) {
    x[j] = rf_placeholder(g, j ? "x1" : "x0", RF_FLOAT64,
                          unknown ? rf_shape_unknown() : shapes[j]);
    feeds[j] = (rf_feed){
        x[j], rf_test_random_tensor(rng, RF_FLOAT64, shapes[j], -1, 1)};
  }
  print_message("fd kind %d %s%s\n", kind, c->name, unknown ? " unknown" : "");
  rf_output f = build_f(g, kind, c, x);
  assert_graph_ok(g);
  rf_shape fs = kind == F_CONV || kind == F_BP_INPUT || kind == F_BP_FILTER ||
                        kind == F_AVG_GRAD
                    ? (kind == F_CONV        ? y_shape(c, false)
                       : kind == F_BP_INPUT  ? x_shape(c)
                       : kind == F_BP_FILTER ? f_shape(c)
                                             : x_shape(c))
                    : y_shape(c, true);
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64, fs, -1, 1);
  rf_output y =
      rf_sum(g, "y", rf_mul(g, "fr", f, rf_const(g, "r", r)), NULL, -1, false);
  rf_tensor_release(r);
  assert_ok(rf_gradients(g, &y, 1, x, nx, NULL, dx));
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *got[2] = {NULL, NULL};
  assert_ok(rf_session_run(s, feeds, nx, dx, nx, NULL, 0, got));
  for (int j = 0; j < nx; j++) {
    rf_shape gs = rf_tensor_shape(got[j]);
    assert_true(rf_shape_equal(&gs, &shapes[j]));
    for (int64_t i = 0; i < rf_shape_num_elements(&shapes[j]); i++) {
      double *d = rf_tensor_mutable_data(feeds[j].value), h = 1e-6;
      double keep = d[i];
      d[i] = keep + h;
      double yp = run_scalar(s, feeds, nx, y);
      d[i] = keep - h;
      double ym = run_scalar(s, feeds, nx, y);
      d[i] = keep;
      double want = (yp - ym) / (2 * h), have = rf_tensor_get(got[j], i);
      if (!(fabs(have - want) <= 1e-6 * fmax(1.0, fabs(want))))
        fail_msg(
            "kind %d, %s%s: d y / d x%d[%lld]: finite difference %.12g, "
            "gradient %.12g",
            kind, c->name, unknown ? " (unknown shapes)" : "", j, (long long)i,
            want, have);
    }
    rf_tensor_release(got[j]);
  }
  for (int j = 0; j < nx; j++) rf_tensor_release(feeds[j].value);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_conv2d_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(3);
  for (int k = 0; k < NCONV; k++)
    for (int unknown = 0; unknown < 2; unknown++)
      check_fd(F_CONV, &conv_cases[k], unknown, &rng);
}

/* The backprop ops' own gradients: gradients of gradients through a conv. */
static void test_conv2d_backprop_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(4);
  for (int k = 0; k < NCONV; k++) {
    check_fd(F_BP_INPUT, &conv_cases[k], false, &rng);
    check_fd(F_BP_FILTER, &conv_cases[k], false, &rng);
  }
}

static void test_pool_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(5);
  for (int k = 0; k < NPOOL; k++)
    for (int unknown = 0; unknown < 2; unknown++) {
      check_fd(F_MAX, &pool_cases[k], unknown, &rng);
      check_fd(F_AVG, &pool_cases[k], unknown, &rng);
    }
  for (int k = 0; k < NPOOL; k++) check_fd(F_AVG_GRAD, &pool_cases[k], 0, &rng);
}

/* MaxPoolGrad has no gradient: a second-order gradient through MaxPool is
 * refused naming it, never silently zero (Conv2D's and AvgPool's work:
 * test_conv2d_backprop_gradients, F_AVG_GRAD). */
static void test_max_pool_second_order_refused(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(4, 1, 4, 4, 1));
  int64_t k[4] = {1, 2, 2, 1};
  rf_output y = rf_max_pool(g, "mp", x, k, k, "VALID");
  rf_output l = rf_sum(g, NULL, rf_mul(g, NULL, y, y), NULL, -1, false), dx;
  assert_ok(rf_gradients(g, &l, 1, &x, 1, NULL, &dx));
  rf_output l2 = rf_sum(g, NULL, dx, NULL, -1, false), d2 = {NULL, 0};
  assert_status(rf_gradients(g, &l2, 1, &x, 1, NULL, &d2), RF_NOT_FOUND,
                "No gradient defined for op 'MaxPoolGrad'");
  assert_null(d2.node);
  rf_graph_free(g);
}

/* ---- errors ---- */

/* Builds Conv2D over placeholders of xs and fs with the attrs given;
 * returns the graph's status. */
static rf_status *conv_status(rf_shape xs, rf_shape fs, rf_dtype dt,
                              const int64_t *strides, int nstrides,
                              const char *padding, const int64_t *dil) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", dt, xs);
  rf_output f = rf_placeholder(g, "f", dt, fs);
  rf_node_builder *b = rf_node_builder_new(g, "Conv2D", "myconv");
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, f);
  rf_node_builder_attr_dtype(b, "T", dt);
  rf_node_builder_attr_int_list(b, "strides", strides, nstrides);
  rf_node_builder_attr_string(b, "padding", padding);
  if (dil) rf_node_builder_attr_int_list(b, "dilations", dil, 4);
  rf_node *n = NULL;
  rf_status *st = rf_node_builder_finish(b, &n);
  rf_graph_free(g);
  return st;
}

static void test_build_errors(void **state) {
  (void)state;
  rf_shape xs = rf_shape_of(4, 2, 8, 8, 3), fs = rf_shape_of(4, 3, 3, 3, 4);
  const int64_t s1[4] = {1, 1, 1, 1}, s0[4] = {1, 0, 1, 1},
                sb[4] = {2, 1, 1, 1};
  assert_ok(conv_status(xs, fs, RF_FLOAT32, s1, 4, "SAME", NULL));
  assert_status(conv_status(xs, fs, RF_FLOAT32, s0, 4, "SAME", NULL),
                RF_INVALID_ARGUMENT, "'strides' must be >= 1");
  assert_status(conv_status(xs, fs, RF_FLOAT32, s0, 4, "SAME", NULL),
                RF_INVALID_ARGUMENT, "myconv");
  assert_status(conv_status(xs, fs, RF_FLOAT32, s0, 4, "SAME", NULL),
                RF_INVALID_ARGUMENT, "Conv2D");
  assert_status(conv_status(xs, fs, RF_FLOAT32, sb, 4, "SAME", NULL),
                RF_INVALID_ARGUMENT, "batch and channel");
  assert_status(conv_status(xs, fs, RF_FLOAT32, s1, 3, "SAME", NULL),
                RF_INVALID_ARGUMENT, "4 entries");
  assert_status(conv_status(xs, fs, RF_FLOAT32, s1, 4, "FULL", NULL),
                RF_INVALID_ARGUMENT, "padding");
  assert_status(conv_status(xs, rf_shape_of(4, 3, 3, 2, 4), RF_FLOAT32, s1, 4,
                            "SAME", NULL),
                RF_INVALID_ARGUMENT, "in_channels");
  assert_status(conv_status(xs, rf_shape_of(4, 9, 3, 3, 4), RF_FLOAT32, s1, 4,
                            "VALID", NULL),
                RF_INVALID_ARGUMENT, "larger than the input");
  assert_status(
      conv_status(xs, rf_shape_of(3, 3, 3, 4), RF_FLOAT32, s1, 4, "SAME", NULL),
      RF_INVALID_ARGUMENT, "filter must have rank 4 (HWIO or OHWI)");
  assert_status(
      conv_status(rf_shape_of(3, 2, 5, 5), fs, RF_FLOAT32, s1, 4, "SAME", NULL),
      RF_INVALID_ARGUMENT, "input must have rank 4 (NHWC)");
  const int64_t dz[4] = {1, 0, 1, 1}, dhuge[4] = {1, INT64_MAX / 2, 1, 1};
  assert_status(conv_status(xs, fs, RF_FLOAT32, s1, 4, "SAME", dz),
                RF_INVALID_ARGUMENT, "'dilations' must be >= 1");
  assert_status(conv_status(xs, fs, RF_FLOAT32, s1, 4, "SAME", dhuge),
                RF_INVALID_ARGUMENT, "overflows");
  /* float16/bfloat16 build (GPU devices run them: test_gpu_conv.c) */
  assert_status(conv_status(xs, fs, RF_INT32, s1, 4, "SAME", NULL),
                RF_INVALID_ARGUMENT, "int32");
  /* (2^31, 2^31, 1, 1) * 4 channels: 2^64 output elements */
  rf_shape big = rf_shape_of(4, (int64_t)1 << 31, (int64_t)1 << 31, 1, 1);
  assert_status(conv_status(big, rf_shape_of(4, 1, 1, 1, 4), RF_FLOAT32, s1, 4,
                            "SAME", NULL),
                RF_INVALID_ARGUMENT, "2^63 - 1");
  /* pools: ksize 0 */
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, xs);
  const int64_t k0[4] = {1, 0, 2, 1};
  rf_output y = rf_max_pool(g, "mp", x, k0, s1, "SAME");
  assert_null(y.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "'ksize' must be");
  rf_graph_clear_status(g);
  /* The backprop ops with constant sizes: out_backprop must be what the
   * window gives, checked at build time as the kernels would. */
  const int32_t in_sz[4] = {2, 7, 7, 3}, f_sz[4] = {3, 3, 3, 4};
  rf_shape v = rf_shape_of(1, 4);
  rf_tensor *ti, *tf;
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, in_sz, &ti));
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, f_sz, &tf));
  rf_output isz = rf_const(g, "isz", ti), fsz = rf_const(g, "fsz", tf);
  rf_tensor_release(ti), rf_tensor_release(tf);
  rf_output f = rf_placeholder(g, "f", RF_FLOAT32, fs);
  rf_output dy =
      rf_placeholder(g, "dy", RF_FLOAT32, rf_shape_of(4, 2, 5, 5, 4));
  assert_null(
      rf_conv2d_backprop_input(g, "bi", isz, f, dy, s1, "SAME", NULL).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'bi' (Conv2DBackpropInput): out_backprop has shape (2, "
                "5, 5, 4); the window gives (2, 7, 7, 4)");
  rf_graph_clear_status(g);
  assert_non_null(
      rf_conv2d_backprop_input(g, "bi2", isz, f, dy, s1, "VALID", NULL).node);
  rf_output x7 =
      rf_placeholder(g, "x7", RF_FLOAT32, rf_shape_of(4, 2, 7, 7, 3));
  assert_null(
      rf_conv2d_backprop_filter(g, "bf", x7, fsz, dy, s1, "SAME", NULL).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'bf' (Conv2DBackpropFilter): out_backprop has shape (2, "
                "5, 5, 4); the window gives (2, 7, 7, 4)");
  rf_graph_clear_status(g);
  assert_non_null(
      rf_conv2d_backprop_filter(g, "bf2", x7, fsz, dy, s1, "VALID", NULL).node);
  assert_graph_ok(g);
  rf_graph_free(g);
}

/* Shapes known only at run time: the kernels reject what the builder
 * could not see, naming the node and op. */
static void test_run_errors(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(6);
  const int64_t s1[4] = {1, 1, 1, 1};
  struct {
    rf_shape xs, fs;
    const char *padding, *sub;
  } cases[] = {
      {rf_shape_of(4, 1, 4, 4, 3), rf_shape_of(4, 3, 3, 2, 2), "SAME",
       "in_channels"},
      {rf_shape_of(4, 1, 2, 4, 2), rf_shape_of(4, 3, 3, 2, 2), "VALID",
       "larger than the input"},
      {rf_shape_of(3, 1, 4, 4), rf_shape_of(4, 3, 3, 2, 2), "SAME",
       "input must have rank 4 (NHWC)"},
      {rf_shape_of(4, 1, 4, 4, 2), rf_shape_of(3, 3, 3, 2), "SAME",
       "filter must have rank 4 (HWIO or OHWI)"},
  };
  for (int k = 0; k < 4; k++) {
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_unknown());
    rf_output f = rf_placeholder(g, "f", RF_FLOAT32, rf_shape_unknown());
    rf_output y = rf_conv2d(g, "runconv", x, f, s1, cases[k].padding, NULL);
    assert_graph_ok(g);
    rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT32, cases[k].xs, -1, 1);
    rf_tensor *fv = rf_test_random_tensor(&rng, RF_FLOAT32, cases[k].fs, -1, 1);
    rf_feed feeds[2] = {{x, xv}, {f, fv}};
    rf_session *s = rf_test_cpu_session(g, 1);
    const char *subs[3] = {"runconv", "Conv2D", cases[k].sub};
    rf_test_expect_run_error(s, feeds, 2, &y, 1, RF_INVALID_ARGUMENT, subs, 3);
    rf_session_free(s);
    rf_tensor_release(xv), rf_tensor_release(fv);
    rf_graph_free(g);
  }
}

/* Allocation failures in the float32 kernels' scratch (oneDNN's blocks,
 * the flipped filter of a stride-1 input gradient with 16+ channels, the
 * direct loops' padded images): each run of a session made beforehand ends
 * in RESOURCE_EXHAUSTED or the right values, and the session runs correctly
 * afterwards (tests/fault_sweep.h). */
typedef struct conv_fault_case {
  const wcase *c;
  rf_graph *g;
  rf_session *s;
  rf_feed feeds[3];
  rf_output outs[3];
  double *want[3];
} conv_fault_case;

static rf_status *conv_fault_attempt(void *arg) {
  conv_fault_case *f = arg;
  rf_tensor *got[3] = {NULL, NULL, NULL};
  rf_status *st = rf_session_run(f->s, f->feeds, 3, f->outs, 3, NULL, 0, got);
  if (!st) {
    const wcase *c = f->c;
    rf_shape shapes[3] = {y_shape(c, false), x_shape(c), f_shape(c)};
    for (int i = 0; i < 3; i++)
      assert_tensor_near(got[i], shapes[i], f->want[i], 1e-4);
  }
  for (int i = 0; i < 3; i++) rf_tensor_release(got[i]);
  return st;
}

static void test_kernel_allocation_failures(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(29);
  /* the second CNN layer's shape, and the first's (the direct loops) */
  const wcase *cases[2] = {&f32_cases[1], &f32_cases[0]};
  for (int k = 0; k < 2; k++) {
    const wcase *c = cases[k];
    conv_fault_case f = {.c = c, .g = rf_graph_new()};
    rf_graph *g = f.g;
    rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
    rf_output fp = rf_placeholder(g, "f", RF_FLOAT32, f_shape(c));
    rf_output dp = rf_placeholder(g, "dy", RF_FLOAT32, y_shape(c, false));
    const int64_t s[4] = {1, c->sh, c->sw, 1};
    const char *pad = c->same ? "SAME" : "VALID";
    f.outs[0] = conv(g, c, xp, fp);
    f.outs[1] = rf_conv2d_backprop_input(g, "bpi", sizes_const(g, x_shape(c)),
                                         fp, dp, s, pad, NULL);
    f.outs[2] = rf_conv2d_backprop_filter(
        g, "bpf", xp, sizes_const(g, f_shape(c)), dp, s, pad, NULL);
    f.s = rf_test_threads_session(g, 1, 2);
    rf_tensor *in[3] = {
        rf_test_random_tensor(&rng, RF_FLOAT32, x_shape(c), -1, 1),
        rf_test_random_tensor(&rng, RF_FLOAT32, f_shape(c), -1, 1),
        rf_test_random_tensor(&rng, RF_FLOAT32, y_shape(c, false), -1, 1)};
    f.feeds[0] = (rf_feed){xp, in[0]};
    f.feeds[1] = (rf_feed){fp, in[1]};
    f.feeds[2] = (rf_feed){dp, in[2]};
    double *xd = rf_test_to_doubles(in[0]), *fd = rf_test_to_doubles(in[1]);
    double *dyd = rf_test_to_doubles(in[2]);
    f.want[0] = conv_ref(c, xd, fd);
    f.want[1] = input_grad_ref(c, fd, dyd);
    f.want[2] = filter_grad_ref(c, xd, dyd);
    assert_ok(conv_fault_attempt(&f)); /* warm: plan and primitives made */
    fs_plan p = {.what = c->name,
                 .attempt = conv_fault_attempt,
                 .arg = &f,
                 .first_n = 60,
                 .max_attempts = 60,
                 /* not counted here: a parallel_for's helper task that never
                  * started holds the loop's shared state until a worker runs
                  * it, after the run has returned (seen as 1-2 "leaked"
                  * allocations in a third of the runs, at varying k);
                  * ASan's leak check at exit covers real leaks */
                 .check_leaks = false,
                 .warm_up = true};
    assert_true(fs_sweep(&p, FS_AFTER).failures > 0);
    assert_true(fs_sweep(&p, FS_ONCE).failures > 0);
    assert_ok(conv_fault_attempt(&f));
    for (int i = 0; i < 3; i++) free(f.want[i]), rf_tensor_release(in[i]);
    free(xd), free(fd), free(dyd);
    rf_session_free(f.s);
    rf_graph_free(g);
  }
}

/* A dim past INT32_MAX in a tensor small in bytes (no channels): the
 * gradients of Conv2D and AvgPool build their size vectors as int64 there
 * (the int32 Shape they used failed the run: "dimension 1 (2147483649)
 * does not fit in int32"), with the shape known when built or only when
 * run, and the three size inputs take int64 vectors from users too. */
static void test_sizes_past_int32(void **state) {
  (void)state;
  const int64_t big = ((int64_t)1 << 31) + 1;
  const int64_t s1[4] = {1, 1, 1, 1}, s2[4] = {1, 2, 1, 1},
                k3[4] = {1, 3, 1, 1};
  rf_shape xs = rf_shape_of(4, 1, big, 1, 0);
  for (int known = 0; known < 2; known++) {
    rf_graph *g = rf_graph_new();
    rf_output x =
        rf_placeholder(g, "x", RF_FLOAT32, known ? xs : rf_shape_unknown());
    rf_output f =
        rf_placeholder(g, "f", RF_FLOAT32, rf_shape_of(4, 3, 1, 0, 0));
    rf_output y = rf_conv2d(g, "c", x, f, s2, "SAME", NULL);
    rf_output p = rf_avg_pool(g, "p", x, k3, s2, "VALID");
    rf_output l = rf_add(g, NULL, rf_sum(g, NULL, y, NULL, -1, false),
                         rf_sum(g, NULL, p, NULL, -1, false));
    rf_output dx[2], in[2] = {x, f};
    assert_ok(rf_gradients(g, &l, 1, in, 2, NULL, dx));
    assert_graph_ok(g);
    rf_tensor *xv, *fv, *out[2];
    assert_ok(rf_tensor_new(RF_FLOAT32, &xs, NULL, &xv));
    rf_shape fs = rf_shape_of(4, 3, 1, 0, 0);
    assert_ok(rf_tensor_new(RF_FLOAT32, &fs, NULL, &fv));
    rf_feed feeds[2] = {{x, xv}, {f, fv}};
    rf_test_run(g, 1, feeds, 2, dx, 2, out);
    rf_shape got = rf_tensor_shape(out[0]);
    assert_true(rf_shape_equal(&got, &xs));
    got = rf_tensor_shape(out[1]);
    assert_true(rf_shape_equal(&got, &fs));
    for (int i = 0; i < 2; i++) rf_tensor_release(out[i]);
    rf_tensor_release(xv);
    rf_tensor_release(fv);
    rf_graph_free(g);
  }
  /* The ops take int64 size vectors (graphs, rf_node_builder); the
   * public builders keep to int32, as documented. */
  rf_graph *g = rf_graph_new();
  int64_t sz[4] = {1, big, 1, 0};
  rf_shape v4 = rf_shape_of(1, 4);
  rf_tensor *st;
  assert_ok(rf_tensor_new_copy(RF_INT64, &v4, sz, &st));
  rf_output sizes = rf_const(g, "sizes", st);
  rf_tensor_release(st);
  rf_output pdy =
      rf_placeholder(g, "pdy", RF_FLOAT32, rf_shape_of(4, 1, big - 2, 1, 0));
  rf_node_builder *b = rf_node_builder_new(g, "AvgPoolGrad", "pg");
  rf_node_builder_input(b, sizes);
  rf_node_builder_input(b, pdy);
  rf_node_builder_attr_dtype(b, "T", RF_FLOAT32);
  rf_node_builder_attr_int_list(b, "ksize", k3, 4);
  rf_node_builder_attr_int_list(b, "strides", s1, 4);
  rf_node_builder_attr_string(b, "padding", "VALID");
  rf_node *pg;
  assert_ok(rf_node_builder_finish(b, &pg));
  rf_shape want = rf_shape_of(4, 1, big, 1, 0);
  rf_shape a = rf_output_shape((rf_output){pg, 0});
  assert_true(rf_shape_equal(&a, &want));
  assert_null(rf_avg_pool_grad(g, "pg2", sizes, pdy, k3, s1, "VALID").node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'pg2' (AvgPoolGrad): input 'orig_input_shape' has "
                "dtype int64, expected int32");
  rf_graph_free(g);
}

/* Every allocation of the kernels (output, im2col scratch) failing in turn:
 * RESOURCE_EXHAUSTED, no output, nothing leaked. */
static void test_allocation_failures(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(7);
  const wcase *c = &conv_cases[0];
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32, x_shape(c), -1, 1);
  rf_tensor *f = rf_test_random_tensor(&rng, RF_FLOAT32, f_shape(c), -1, 1);
  rf_tensor *dy =
      rf_test_random_tensor(&rng, RF_FLOAT32, y_shape(c, false), -1, 1);
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
  rf_output fp = rf_placeholder(g, "f", RF_FLOAT32, f_shape(c));
  rf_output dp = rf_placeholder(g, "dy", RF_FLOAT32, y_shape(c, false));
  rf_output sp = rf_placeholder(g, "s", RF_INT32, rf_shape_of(1, 4));
  int64_t s[4] = {1, 1, 1, 1};
  rf_node *nodes[4] = {
      conv(g, c, xp, fp).node,
      rf_conv2d_backprop_input(g, NULL, sp, fp, dp, s, "SAME", NULL).node,
      rf_conv2d_backprop_filter(g, NULL, xp, sp, dp, s, "SAME", NULL).node,
      pool(g, c, xp, true).node};
  assert_graph_ok(g);
  int32_t xd[4] = {(int32_t)c->n, (int32_t)c->h, (int32_t)c->w, (int32_t)c->c};
  int32_t fd[4] = {(int32_t)c->kh, (int32_t)c->kw, (int32_t)c->c,
                   (int32_t)c->oc};
  rf_shape v = rf_shape_of(1, 4);
  rf_tensor *xs, *fs;
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, xd, &xs));
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, fd, &fs));
  rf_tensor *in[4][3] = {{x, f}, {xs, f, dy}, {x, fs, dy}, {x}};
  for (int i = 0; i < 4; i++) rf_test_kernel_under_faults(nodes[i], in[i]);
  rf_tensor *all[5] = {x, f, dy, xs, fs};
  for (int i = 0; i < 5; i++) rf_tensor_release(all[i]);
  rf_graph_free(g);
}

/* A graph saved to JSON and loaded back keeps the new ops and attrs. */
static void test_json_round_trip(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  const wcase *c = &conv_cases[4];
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
  rf_output f = rf_placeholder(g, "f", RF_FLOAT32, f_shape(c));
  rf_output y = conv(g, c, x, f);
  rf_output p = pool(g, &pool_cases[0], y, true);
  rf_output a = pool(g, &pool_cases[0], y, false);
  rf_output sum = rf_add(g, "sum", p, a);
  rf_output dx[2], xs[2] = {x, f};
  assert_ok(rf_gradients(g, &sum, 1, xs, 2, NULL, dx));
  assert_graph_ok(g);
  char *json = NULL;
  assert_ok(rf_graph_to_json(g, &json));
  rf_graph *h = NULL;
  assert_ok(rf_graph_from_json(json, strlen(json), &h));
  char *again = NULL;
  assert_ok(rf_graph_to_json(h, &again));
  assert_string_equal(json, again);
  assert_non_null(strstr(json, "\"dilations\""));
  assert_non_null(strstr(json, "Conv2DBackpropFilter"));
  assert_non_null(strstr(json, "MaxPoolGrad"));
  assert_non_null(strstr(json, "AvgPoolGrad"));
  rf_string_free(json);
  rf_string_free(again);
  rf_graph_free(h);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv2d_forward),
      cmocka_unit_test(test_conv2d_float32_all_paths),
      cmocka_unit_test(test_pool_forward),
      cmocka_unit_test(test_max_pool_nan),
      cmocka_unit_test(test_max_pool_grad_ties),
      cmocka_unit_test(test_conv2d_gradients),
      cmocka_unit_test(test_conv2d_backprop_gradients),
      cmocka_unit_test(test_pool_gradients),
      cmocka_unit_test(test_max_pool_second_order_refused),
      cmocka_unit_test(test_build_errors),
      cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_kernel_allocation_failures),
      cmocka_unit_test(test_sizes_past_int32),
      cmocka_unit_test(test_allocation_failures),
      cmocka_unit_test(test_json_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
