/* tests/test_conv_filter_format.c - Conv2D, Conv2DBackpropInput and
 * Conv2DBackpropFilter with filter_format OHWI (rf_conv2d_with_format and
 * the two backprop builders), run through sessions on the CPU kernels
 * (oneDNN for float32 where it takes the shape, im2col + OpenBLAS for
 * float64 and the rest) on 1 and 3 pool threads: every output and the
 * gradients rf_gradients builds against the float64 references of
 * conv_cases.h with the filter permuted (0, 2, 3, 1) into OHWI order,
 * gradients of gradients against central differences, the fused
 * Conv2D -> BiasAdd -> Relu with an OHWI filter, and the errors that name
 * the format's axes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_cases.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

static const char *const ohwi = "OHWI";

static rf_shape f_shape_ohwi(const wcase *c) {
  return rf_shape_of(4, c->oc, c->kh, c->kw, c->c);
}

/* The filter f of case c in the other layout: HWIO (kh, kw, c, oc) to
 * OHWI (to_ohwi), or back. */
static double *permuted(const wcase *c, const double *f, bool to_ohwi) {
  int64_t n = c->kh * c->kw * c->c * c->oc;
  double *o = malloc(sizeof *o * (size_t)(n + 1));
  for (int64_t i = 0; i < c->kh; i++)
    for (int64_t j = 0; j < c->kw; j++)
      for (int64_t k = 0; k < c->c; k++)
        for (int64_t m = 0; m < c->oc; m++) {
          int64_t at_hwio = ((i * c->kw + j) * c->c + k) * c->oc + m;
          int64_t at_ohwi = ((m * c->kh + i) * c->kw + j) * c->c + k;
          o[to_ohwi ? at_ohwi : at_hwio] = f[to_ohwi ? at_hwio : at_ohwi];
        }
  return o;
}

static double *to_ohwi(const wcase *c, const double *f) {
  return permuted(c, f, true);
}

static double *to_hwio(const wcase *c, const double *f) {
  return permuted(c, f, false);
}

static rf_output conv_ohwi(rf_graph *g, const char *name, const wcase *c,
                           rf_output x, rf_output f) {
  int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
  return rf_conv2d_with_format(g, name, x, f, s, c->same ? "SAME" : "VALID", d,
                               ohwi);
}

/* The tolerance of a float32 sum of `terms` products (oneDNN's order). */
static double tol_of(rf_dtype dt, double terms) {
  if (dt == RF_FLOAT64) return 1e-12 * (terms > 1 ? terms : 1);
  return 1e-7 * terms > 1e-5 ? 1e-7 * terms : 1e-5;
}

/* Case c in dt on `threads` pool threads: Conv2D, both backprop ops and
 * rf_gradients' dx and df, OHWI throughout, against the references; twice
 * in one session (cached primitives, fresh data). */
static void check_case(const wcase *c, rf_dtype dt, int threads,
                       uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", dt, x_shape(c));
  rf_output fp = rf_placeholder(g, "f", dt, f_shape_ohwi(c));
  rf_output dp = rf_placeholder(g, "dy", dt, y_shape(c, false));
  int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
  const char *pad = c->same ? "SAME" : "VALID";
  rf_output y = conv_ohwi(g, "conv", c, xp, fp);
  rf_output outs[5] = {
      y,
      rf_conv2d_backprop_input_with_format(g, "bpi", sizes_const(g, x_shape(c)),
                                           fp, dp, s, pad, d, ohwi),
      rf_conv2d_backprop_filter_with_format(
          g, "bpf", xp, sizes_const(g, f_shape_ohwi(c)), dp, s, pad, d, ohwi)};
  rf_output wrt[2] = {xp, fp};
  assert_ok(rf_gradients(g, &y, 1, wrt, 2, &dp, &outs[3]));
  assert_graph_ok(g);
  rf_shape shapes[5] = {y_shape(c, false), x_shape(c), f_shape_ohwi(c),
                        x_shape(c), f_shape_ohwi(c)};
  for (int i = 0; i < 5; i++) {
    rf_shape built = rf_output_shape(outs[i]);
    assert_true(rf_shape_equal(&built, &shapes[i]));
  }
  const char *fmt = NULL;
  assert_ok(rf_node_attr_string(outs[4].node, "filter_format", &fmt));
  assert_string_equal(fmt, ohwi); /* rf_gradients kept the format */
  rf_session *sess = rf_test_threads_session(g, 1, threads);
  for (int rep = 0; rep < 2; rep++) {
    rf_tensor *x = rf_test_random_tensor(rng, dt, x_shape(c), -1, 1);
    rf_tensor *f = rf_test_random_tensor(rng, dt, f_shape_ohwi(c), -1, 1);
    rf_tensor *dy = rf_test_random_tensor(rng, dt, y_shape(c, false), -1, 1);
    rf_feed feeds[3] = {{xp, x}, {fp, f}, {dp, dy}};
    rf_tensor *got[5];
    assert_ok(rf_session_run(sess, feeds, 3, outs, 5, NULL, 0, got));
    double *xd = rf_test_to_doubles(x), *fo = rf_test_to_doubles(f);
    double *dyd = rf_test_to_doubles(dy), *fh = to_hwio(c, fo);
    double *dw = filter_grad_ref(c, xd, dyd);
    double *want[5] = {conv_ref(c, xd, fh), input_grad_ref(c, fh, dyd),
                       to_ohwi(c, dw), input_grad_ref(c, fh, dyd),
                       to_ohwi(c, dw)};
    geo ge = geo_of(c);
    double terms[5] = {
        (double)(c->kh * c->kw * c->c), (double)(c->kh * c->kw * c->oc),
        (double)(c->n * ge.oh * ge.ow), (double)(c->kh * c->kw * c->oc),
        (double)(c->n * ge.oh * ge.ow)};
    print_message("OHWI %s %s, %d threads\n", c->name, rf_dtype_name(dt),
                  threads);
    for (int i = 0; i < 5; i++) {
      assert_tensor_near(got[i], shapes[i], want[i], tol_of(dt, terms[i]));
      rf_tensor_release(got[i]);
      free(want[i]);
    }
    free(xd), free(fo), free(dyd), free(fh), free(dw);
    rf_tensor_release(x), rf_tensor_release(f), rf_tensor_release(dy);
  }
  rf_session_free(sess);
  rf_graph_free(g);
}

static void test_ohwi_against_references(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(31);
  int nf32 = (int)(sizeof f32_cases / sizeof f32_cases[0]);
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64};
  for (int threads = 1; threads <= 3; threads += 2)
    for (int t = 0; t < 2; t++)
      for (int k = 0; k < NCONV + nf32; k++)
        check_case(k < NCONV ? &conv_cases[k] : &f32_cases[k - NCONV], dts[t],
                   threads, &rng);
}

/* The same random data through HWIO and OHWI in one float32 session:
 * the outputs agree (the layouts differ only in how the kernels read the
 * filter). */
static void test_ohwi_matches_hwio(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(32);
  const wcase *c = &f32_cases[1]; /* the CNN's second layer */
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
  rf_output fh = rf_placeholder(g, "fh", RF_FLOAT32, f_shape(c));
  int64_t perm[4] = {3, 0, 1, 2};
  rf_output fo = rf_transpose(g, "fo", fh, perm, 4);
  int64_t s[4] = {1, 1, 1, 1};
  rf_output y[2] = {rf_conv2d(g, "hwio", xp, fh, s, "SAME", NULL),
                    conv_ohwi(g, "ohwi", c, xp, fo)};
  assert_graph_ok(g);
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32, x_shape(c), -1, 1);
  rf_tensor *f = rf_test_random_tensor(&rng, RF_FLOAT32, f_shape(c), -1, 1);
  rf_feed feeds[2] = {{xp, x}, {fh, f}};
  rf_tensor *out[2];
  rf_test_run(g, 2, feeds, 2, y, 2, out);
  double *a = rf_test_to_doubles(out[0]);
  rf_shape ys = y_shape(c, false);
  assert_tensor_near(out[1], ys, a, 1e-5);
  free(a);
  rf_tensor_release(out[0]), rf_tensor_release(out[1]);
  rf_tensor_release(x), rf_tensor_release(f);
  rf_graph_free(g);
}

static double run_scalar(rf_session *s, rf_feed *feeds, int n, rf_output y) {
  rf_tensor *v = NULL;
  assert_ok(rf_session_run(s, feeds, n, &y, 1, NULL, 0, &v));
  double r = rf_tensor_get(v, 0);
  rf_tensor_release(v);
  return r;
}

/* Gradients of gradients through an OHWI convolution: with y = sum(conv(x,
 * f) * q), dx and df its gradients, z = sum(dx * rx) + sum(df * rf)
 * differentiated with respect to x, f and q (the backprop ops' own
 * gradients keep the format), against central differences in float64. */
static void check_second_order(const wcase *c, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_shape shapes[3] = {x_shape(c), f_shape_ohwi(c), y_shape(c, false)};
  rf_output in[3] = {rf_placeholder(g, "x", RF_FLOAT64, shapes[0]),
                     rf_placeholder(g, "f", RF_FLOAT64, shapes[1]),
                     rf_placeholder(g, "q", RF_FLOAT64, shapes[2])};
  rf_tensor *rx = rf_test_random_tensor(rng, RF_FLOAT64, shapes[0], -1, 1);
  rf_tensor *rf = rf_test_random_tensor(rng, RF_FLOAT64, shapes[1], -1, 1);
  rf_output y = rf_sum(
      g, "y", rf_mul(g, "yq", conv_ohwi(g, "conv", c, in[0], in[1]), in[2]),
      NULL, -1, false);
  rf_output d1[2];
  assert_ok(rf_gradients(g, &y, 1, in, 2, NULL, d1));
  rf_output z =
      rf_add(g, "z",
             rf_sum(g, "zx", rf_mul(g, "dxr", d1[0], rf_const(g, "rx", rx)),
                    NULL, -1, false),
             rf_sum(g, "zf", rf_mul(g, "dfr", d1[1], rf_const(g, "rf", rf)),
                    NULL, -1, false));
  rf_output dz[3];
  assert_ok(rf_gradients(g, &z, 1, in, 3, NULL, dz));
  assert_graph_ok(g);
  rf_feed feeds[3];
  for (int j = 0; j < 3; j++)
    feeds[j] = (rf_feed){
        in[j], rf_test_random_tensor(rng, RF_FLOAT64, shapes[j], -1, 1)};
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *got[3];
  assert_ok(rf_session_run(s, feeds, 3, dz, 3, NULL, 0, got));
  print_message("OHWI second order %s\n", c->name);
  for (int j = 0; j < 3; j++) {
    int64_t n = rf_tensor_num_elements(feeds[j].value);
    for (int64_t i = 0; i < n; i++) {
      double *d = rf_tensor_mutable_data(feeds[j].value), h = 1e-6;
      double keep = d[i];
      d[i] = keep + h;
      double zp = run_scalar(s, feeds, 3, z);
      d[i] = keep - h;
      double zm = run_scalar(s, feeds, 3, z);
      d[i] = keep;
      double want = (zp - zm) / (2 * h), have = rf_tensor_get(got[j], i);
      if (!(fabs(have - want) <= 1e-6 * fmax(1.0, fabs(want))))
        fail_msg(
            "%s: d z / d in%d[%lld]: finite difference %.12g, gradient "
            "%.12g",
            c->name, j, (long long)i, want, have);
    }
    rf_tensor_release(got[j]);
  }
  for (int j = 0; j < 3; j++) rf_tensor_release(feeds[j].value);
  rf_tensor_release(rx), rf_tensor_release(rf);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_ohwi_second_order(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(33);
  for (int k = 0; k < 5; k++) check_second_order(&conv_cases[k], &rng);
}

/* Conv2D -> BiasAdd -> Relu with an OHWI filter fused on CPU devices
 * (conv_epilogues ALL: the nested unfused kernels read the fused node's
 * format): bit-identical to the unfused session. */
static void test_ohwi_fused_epilogue(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(34);
  const wcase *c = &f32_cases[0];
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
  rf_output fp = rf_placeholder(g, "f", RF_FLOAT32, f_shape_ohwi(c));
  rf_output bp = rf_placeholder(g, "b", RF_FLOAT32, rf_shape_of(1, c->oc));
  rf_output y = rf_relu(
      g, "relu", rf_bias_add(g, "bias", conv_ohwi(g, "conv", c, xp, fp), bp));
  assert_graph_ok(g);
  rf_tensor *v[3] = {
      rf_test_random_tensor(&rng, RF_FLOAT32, x_shape(c), -1, 1),
      rf_test_random_tensor(&rng, RF_FLOAT32, f_shape_ohwi(c), -1, 1),
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, c->oc), -1, 1)};
  rf_feed feeds[3] = {{xp, v[0]}, {fp, v[1]}, {bp, v[2]}};
  rf_tensor *out[2];
  for (int fused = 0; fused < 2; fused++) {
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_threads = 1;
    o.conv_epilogues = fused ? RF_CONV_EPILOGUES_ALL : RF_CONV_EPILOGUES_OFF;
    rf_session *s;
    assert_ok(rf_session_new(g, &o, &s));
    assert_ok(rf_session_run(s, feeds, 3, &y, 1, NULL, 0, &out[fused]));
    rf_session_free(s);
  }
  int64_t n = rf_tensor_num_elements(out[0]);
  assert_int_equal(rf_tensor_num_elements(out[1]), n);
  assert_memory_equal(rf_tensor_data(out[0]), rf_tensor_data(out[1]),
                      (size_t)n * sizeof(float));
  for (int i = 0; i < 3; i++) rf_tensor_release(v[i]);
  rf_tensor_release(out[0]), rf_tensor_release(out[1]);
  rf_graph_free(g);
}

/* A format that is neither HWIO nor OHWI, at build time; the OHWI axes in
 * the channel messages at build and at run time. */
static void test_ohwi_errors(void **state) {
  (void)state;
  const int64_t s1[4] = {1, 1, 1, 1};
  rf_shape xs = rf_shape_of(4, 1, 4, 4, 3);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, xs);
  rf_output f = rf_placeholder(g, "f", RF_FLOAT32, rf_shape_of(4, 2, 3, 3, 3));
  rf_output y =
      rf_conv2d_with_format(g, "badfmt", x, f, s1, "SAME", NULL, "HWOI");
  assert_null(y.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "filter_format");
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "badfmt");
  rf_graph_free(g);

  g = rf_graph_new();
  x = rf_placeholder(g, "x", RF_FLOAT32, xs);
  f = rf_placeholder(g, "f", RF_FLOAT32, rf_shape_of(4, 2, 3, 3, 5));
  y = rf_conv2d_with_format(g, "chans", x, f, s1, "SAME", NULL, ohwi);
  assert_null(y.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "the filter's in_channels (dim 3) (5) does not match");
  rf_graph_free(g);

  /* shapes known at run time only: the kernel's message */
  g = rf_graph_new();
  x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_unknown());
  f = rf_placeholder(g, "f", RF_FLOAT32, rf_shape_unknown());
  y = rf_conv2d_with_format(g, "runconv", x, f, s1, "SAME", NULL, ohwi);
  assert_graph_ok(g);
  uint64_t rng = rf_test_rng(35);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT32, xs, -1, 1);
  rf_tensor *fv = rf_test_random_tensor(&rng, RF_FLOAT32,
                                        rf_shape_of(4, 2, 3, 3, 4), -1, 1);
  rf_feed feeds[2] = {{x, xv}, {f, fv}};
  rf_session *s = rf_test_cpu_session(g, 1);
  const char *subs[3] = {"runconv", "Conv2D", "in_channels (dim 3)"};
  rf_test_expect_run_error(s, feeds, 2, &y, 1, RF_INVALID_ARGUMENT, subs, 3);
  rf_session_free(s);
  rf_tensor_release(xv), rf_tensor_release(fv);
  rf_graph_free(g);
}

/* The attr survives a JSON round trip, with the gradient nodes'. */
static void test_ohwi_json_round_trip(void **state) {
  (void)state;
  const wcase *c = &conv_cases[0];
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
  rf_output f = rf_placeholder(g, "f", RF_FLOAT32, f_shape_ohwi(c));
  rf_output y = conv_ohwi(g, "conv", c, x, f), dx[2], xs[2] = {x, f};
  assert_ok(rf_gradients(g, &y, 1, xs, 2, NULL, dx));
  assert_graph_ok(g);
  char *json = NULL;
  assert_ok(rf_graph_to_json(g, &json));
  rf_graph *h = NULL;
  assert_ok(rf_graph_from_json(json, strlen(json), &h));
  const char *fmt = NULL;
  assert_ok(rf_node_attr_string(rf_graph_find_node(h, "conv"), "filter_format",
                                &fmt));
  assert_string_equal(fmt, ohwi);
  assert_ok(rf_node_attr_string(dx[1].node, "filter_format", &fmt));
  assert_string_equal(fmt, ohwi);
  rf_string_free(json);
  rf_graph_free(h);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ohwi_against_references),
      cmocka_unit_test(test_ohwi_matches_hwio),
      cmocka_unit_test(test_ohwi_second_order),
      cmocka_unit_test(test_ohwi_fused_epilogue),
      cmocka_unit_test(test_ohwi_errors),
      cmocka_unit_test(test_ohwi_json_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
