/* tests/test_conv_direct.c - the direct AVX-512 loops for one-channel
 * float32 convolutions (kernels/cpu/conv_direct.c): Conv2D and
 * Conv2DBackpropFilter on the shapes they take (batch 1, 3, 64; rows
 * narrower than, as wide as and wider than a 14-pixel tile; SAME and VALID;
 * inputs smaller than the window; 16, 32 and 48 output channels; windows of
 * 1 to 7), with HWIO and OHWI filters, on 1, 2 and 3 pool threads, against
 * float64 references; and shapes they do not take (more channels, strides,
 * dilations, other output counts and window widths), which must still give
 * the references through oneDNN or im2col. Which shapes are taken is
 * checked against rf__conv_direct_fits where the CPU has AVX-512. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_cases.h"
#include "kernels/cpu/conv_direct.h"
#include "testutil.h"

typedef struct dcase {
  wcase c;
  bool fwd, grad; /* whether the direct loops take each (on AVX-512) */
} dcase;

static const dcase cases[] = {
    /* taken */
    {{"28x28 k5 oc32 b64 SAME", 64, 28, 28, 1, 5, 5, 32, 1, 1, 1, 1, true},
     true,
     true},
    {{"28x28 k5 oc32 b3 VALID", 3, 28, 28, 1, 5, 5, 32, 1, 1, 1, 1, false},
     true,
     true},
    {{"28x28 k5 oc16 b1 SAME", 1, 28, 28, 1, 5, 5, 16, 1, 1, 1, 1, true},
     true,
     true},
    {{"20x17 k5 oc48 b3 SAME", 3, 20, 17, 1, 5, 5, 48, 1, 1, 1, 1, true},
     true,
     true},
    {{"9x10 k3 oc48 b3 SAME", 3, 9, 10, 1, 3, 3, 48, 1, 1, 1, 1, true},
     true,
     true},
    {{"9x10 k3 oc32 b1 VALID", 1, 9, 10, 1, 3, 3, 32, 1, 1, 1, 1, false},
     true,
     true},
    {{"input smaller than window SAME", 3, 2, 3, 1, 5, 5, 16, 1, 1, 1, 1, true},
     true,
     true},
    {{"1x1 image k5 SAME", 1, 1, 1, 1, 5, 5, 32, 1, 1, 1, 1, true}, true, true},
    {{"7x5 window, 15 wide, VALID", 3, 16, 15, 1, 7, 5, 16, 1, 1, 1, 1, false},
     true,
     true},
    {{"3x3 window 16 rows oc64", 3, 16, 30, 1, 3, 3, 64, 1, 1, 1, 1, true},
     true,
     true},
    {{"1x3 window", 3, 6, 14, 1, 1, 3, 32, 1, 1, 1, 1, true}, true, true},
    {{"4x4 window SAME (grad: not taken)", 3, 11, 13, 1, 4, 4, 32, 1, 1, 1, 1,
      true},
     true,
     false},
    {{"7x7 window SAME (grad: not taken)", 2, 12, 29, 1, 7, 7, 16, 1, 1, 1, 1,
      true},
     true,
     false},
    {{"1x1 window (grad: not taken)", 2, 5, 16, 1, 1, 1, 32, 1, 1, 1, 1, false},
     true,
     false},
    /* not taken */
    {{"2 channels", 3, 10, 10, 2, 5, 5, 32, 1, 1, 1, 1, true}, false, false},
    {{"oc 8", 3, 10, 10, 1, 5, 5, 8, 1, 1, 1, 1, true}, false, false},
    {{"oc 20", 3, 10, 10, 1, 5, 5, 20, 1, 1, 1, 1, true}, false, false},
    {{"stride 2", 3, 11, 10, 1, 5, 5, 32, 2, 2, 1, 1, true}, false, false},
    {{"stride 1x2 VALID", 3, 11, 10, 1, 3, 3, 16, 1, 2, 1, 1, false},
     false,
     false},
    {{"dilation 2", 3, 12, 12, 1, 3, 3, 32, 1, 1, 2, 2, true}, false, false},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static rf_shape f_shape_as(const wcase *c, bool ohwi) {
  return ohwi ? rf_shape_of(4, c->oc, c->kh, c->kw, c->c) : f_shape(c);
}

/* HWIO f (kh, kw, c, oc) as OHWI, or back (to_ohwi false). */
static double *permuted(const wcase *c, const double *f, bool to_ohwi) {
  int64_t taps = c->kh * c->kw * c->c;
  double *o = malloc(sizeof *o * (size_t)(taps * c->oc + 1));
  for (int64_t t = 0; t < taps; t++)
    for (int64_t m = 0; m < c->oc; m++) {
      if (to_ohwi)
        o[m * taps + t] = f[t * c->oc + m];
      else
        o[t * c->oc + m] = f[m * taps + t];
    }
  return o;
}

/* The op's geometry as the kernels see it, for rf__conv_direct_fits. */
static rf__conv_geom geom_of(const wcase *c, bool ohwi) {
  geo g = geo_of(c);
  rf__conv_geom r = {.n = c->n,
                     .h = c->h,
                     .w = c->w,
                     .c = c->c,
                     .kh = c->kh,
                     .kw = c->kw,
                     .oc = c->oc,
                     .oh = g.oh,
                     .ow = g.ow,
                     .sh = c->sh,
                     .sw = c->sw,
                     .dh = c->dh,
                     .dw = c->dw,
                     .pt = g.pt,
                     .pl = g.pl,
                     .ohwi = ohwi};
  return r;
}

/* Conv2D and Conv2DBackpropFilter of c in float32 on `threads` pool
 * threads, twice in one session with fresh data, against the float64
 * references. */
static void check_case(const wcase *c, bool ohwi, int threads, uint64_t *rng) {
  const char *fmt = ohwi ? "OHWI" : "HWIO";
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, x_shape(c));
  rf_output fp = rf_placeholder(g, "f", RF_FLOAT32, f_shape_as(c, ohwi));
  rf_output dp = rf_placeholder(g, "dy", RF_FLOAT32, y_shape(c, false));
  int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
  const char *pad = c->same ? "SAME" : "VALID";
  rf_output outs[2] = {rf_conv2d_with_format(g, "fwd", xp, fp, s, pad, d, fmt),
                       rf_conv2d_backprop_filter_with_format(
                           g, "bpf", xp, sizes_const(g, f_shape_as(c, ohwi)),
                           dp, s, pad, d, fmt)};
  assert_graph_ok(g);
  rf_session *sess = rf_test_threads_session(g, 1, threads);
  for (int rep = 0; rep < 2; rep++) {
    rf_tensor *x = rf_test_random_tensor(rng, RF_FLOAT32, x_shape(c), -1, 1);
    rf_tensor *f =
        rf_test_random_tensor(rng, RF_FLOAT32, f_shape_as(c, ohwi), -1, 1);
    rf_tensor *dy =
        rf_test_random_tensor(rng, RF_FLOAT32, y_shape(c, false), -1, 1);
    rf_feed feeds[3] = {{xp, x}, {fp, f}, {dp, dy}};
    rf_tensor *got[2];
    assert_ok(rf_session_run(sess, feeds, 3, outs, 2, NULL, 0, got));
    double *xd = rf_test_to_doubles(x), *fd = rf_test_to_doubles(f);
    double *dyd = rf_test_to_doubles(dy);
    double *hwio = ohwi ? permuted(c, fd, false) : NULL;
    double *y = conv_ref(c, xd, ohwi ? hwio : fd);
    double *dw = filter_grad_ref(c, xd, dyd);
    double *dw_as = ohwi ? permuted(c, dw, true) : NULL;
    print_message("%s, %s, %d threads\n", c->name, fmt, threads);
    /* float32 sums of kh*kw (forward) and n*oh*ow (filter gradient)
     * products, in another order than the reference's */
    geo gg = geo_of(c);
    double terms[2] = {(double)(c->kh * c->kw * c->c),
                       (double)(c->n * gg.oh * gg.ow)};
    double tol[2];
    for (int i = 0; i < 2; i++)
      tol[i] = 1e-7 * terms[i] > 1e-5 ? 1e-7 * terms[i] : 1e-5;
    assert_tensor_near(got[0], y_shape(c, false), y, tol[0]);
    assert_tensor_near(got[1], f_shape_as(c, ohwi), ohwi ? dw_as : dw, tol[1]);
    rf_tensor_release(got[0]), rf_tensor_release(got[1]);
    free(xd), free(fd), free(dyd), free(hwio), free(y), free(dw), free(dw_as);
    rf_tensor_release(x), rf_tensor_release(f), rf_tensor_release(dy);
  }
  rf_session_free(sess);
  rf_graph_free(g);
}

/* The direct loops take exactly the shapes listed as taken (on AVX-512
 * without RF_CPU_CONV), and none anywhere else. */
static void test_which_shapes(void **state) {
  (void)state;
  bool avx512 = __builtin_cpu_supports("avx512f") && !getenv("RF_CPU_CONV");
  for (int k = 0; k < NCASES; k++)
    for (int f = 0; f < 2; f++) {
      rf__conv_geom g = geom_of(&cases[k].c, f == 1);
      print_message("%s\n", cases[k].c.name);
      assert_int_equal(rf__conv_direct_fits(RF_CONV_DNNL_FORWARD, &g),
                       avx512 && cases[k].fwd);
      assert_int_equal(rf__conv_direct_fits(RF_CONV_DNNL_FILTER_GRAD, &g),
                       avx512 && cases[k].grad);
      assert_false(rf__conv_direct_fits(RF_CONV_DNNL_INPUT_GRAD, &g));
    }
}

static void test_against_references(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(26);
  for (int threads = 1; threads <= 3; threads++)
    for (int k = 0; k < NCASES; k++)
      for (int f = 0; f < 2; f++) {
        /* the batch-64 case once a filter layout: it is the slow one */
        if (cases[k].c.n == 64 && threads != 2) continue;
        check_case(&cases[k].c, f == 1, threads, &rng);
      }
}

int main(void) {
  (void)input_grad_ref; /* conv_cases.h's, not needed here */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_which_shapes),
      cmocka_unit_test(test_against_references),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
