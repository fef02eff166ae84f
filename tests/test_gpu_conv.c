/* tests/test_gpu_conv.c - the GPU kernels of Conv2D, Conv2DBackpropInput,
 * Conv2DBackpropFilter, MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad
 * against the CPU kernels (tests/gpu_compare.h), float32 and float64, over
 * the edge cases of test_conv_ops.c: size-1 dims, an input smaller than the
 * window, stride > window, dilation > 1, batch 0, 1x1 windows, with HWIO
 * and OHWI filters (filter_format). Skips without
 * a GPU; RF_GPU_TEST_ON_CPU=1 runs it with cpu:1 standing in.
 *
 * float16 and bfloat16 run on GPUs only (through cuDNN where it takes the
 * padding, else the direct kernels): their results are checked against the
 * CPU's float64 kernels on the same (rounded) values, and a CPU device must
 * refuse them with UNIMPLEMENTED. */
#include "gpu_compare.h"

typedef struct wcase {
  int64_t n, h, w, c, kh, kw, oc, sh, sw, dh, dw;
  bool same;
} wcase;

static const wcase cases[] = {
    {2, 5, 6, 3, 3, 3, 4, 1, 1, 1, 1, true},
    {2, 7, 6, 2, 3, 2, 3, 2, 1, 1, 1, false},
    {1, 7, 8, 2, 2, 2, 2, 3, 3, 1, 1, true},
    {1, 7, 6, 2, 3, 3, 2, 1, 1, 2, 2, true},
    {2, 8, 9, 1, 2, 3, 2, 2, 2, 2, 3, false},
    {1, 2, 3, 2, 5, 5, 2, 1, 1, 1, 1, true},
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, true},
    {2, 3, 3, 4, 1, 1, 2, 1, 1, 1, 1, false},
    {0, 4, 4, 2, 3, 3, 2, 1, 1, 1, 1, true},
    {8, 28, 28, 3, 5, 5, 16, 1, 1, 1, 1, true}, /* a CNN's first layer */
    {4, 14, 14, 16, 5, 5, 8, 2, 2, 1, 1, true},
    {3, 8, 6, 5, 2, 2, 4, 2, 2, 1, 1, true}, /* 2x2 windows tiling */
    {2, 7, 9, 3, 2, 3, 2, 2, 3, 1, 1, true}, /* disjoint, SAME padded */
    /* channels filling 16-byte vectors (the pools' vector path) */
    {2, 8, 8, 8, 2, 2, 4, 2, 2, 1, 1, true},  /* 2x2 windows tiling */
    {2, 7, 9, 16, 3, 3, 8, 2, 2, 1, 1, true}, /* overlapping, padded */
    {1, 5, 7, 8, 2, 3, 4, 2, 3, 1, 1, true},  /* disjoint, SAME padded */
    {2, 9, 7, 8, 2, 2, 4, 3, 3, 1, 1, false}, /* disjoint, gaps */
    /* filters of several 32 x 32 tiles, partial at both edges (cuDNN's
     * HWIO <-> KRSC transpose): 81 x 40 */
    {2, 6, 5, 9, 3, 3, 40, 1, 1, 1, 1, true},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, bool same) {
  int64_t eff = (k - 1) * d + 1;
  if (same) return (in + s - 1) / s;
  return in == 0 ? 0 : (in - eff) / s + 1;
}

static rf_output sizes_const(rf_graph *g, const int64_t *dims) {
  int32_t d[4];
  for (int i = 0; i < 4; i++) d[i] = (int32_t)dims[i];
  rf_shape v = rf_shape_of(1, (int64_t)4);
  rf_tensor *t;
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, d, &t));
  rf_output o = rf_const(g, NULL, t);
  rf_tensor_release(t);
  return o;
}

/* The filter's shape of case c in its layout. */
static rf_shape filter_shape(const wcase *c, bool ohwi) {
  return ohwi ? rf_shape_of(4, c->oc, c->kh, c->kw, c->c)
              : rf_shape_of(4, c->kh, c->kw, c->c, c->oc);
}

/* in: x, f, dy (conv's output shape); out: y, dx, df; the filter HWIO or
 * OHWI (filter_format). */
static int build_conv_in(rf_graph *g, const rf_output *in, int k, bool ohwi,
                         rf_output *out) {
  const wcase *c = &cases[k];
  int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
  int64_t xs[4] = {c->n, c->h, c->w, c->c};
  rf_shape fshape = filter_shape(c, ohwi);
  const char *p = c->same ? "SAME" : "VALID", *fmt = ohwi ? "OHWI" : "HWIO";
  out[0] = rf_conv2d_with_format(g, NULL, in[0], in[1], s, p, d, fmt);
  out[1] = rf_conv2d_backprop_input_with_format(g, NULL, sizes_const(g, xs),
                                                in[1], in[2], s, p, d, fmt);
  out[2] = rf_conv2d_backprop_filter_with_format(
      g, NULL, in[0], sizes_const(g, fshape.dims), in[2], s, p, d, fmt);
  return 3;
}

static int build_conv(rf_graph *g, const rf_output *in, const void *arg,
                      rf_output *out) {
  return build_conv_in(g, in, *(const int *)arg, false, out);
}

static int build_conv_ohwi(rf_graph *g, const rf_output *in, const void *arg,
                           rf_output *out) {
  return build_conv_in(g, in, *(const int *)arg, true, out);
}

/* in: x, dy (the pool's output shape); out: max, avg and their grads. */
static int build_pool(rf_graph *g, const rf_output *in, const void *arg,
                      rf_output *out) {
  const wcase *c = &cases[*(const int *)arg];
  int64_t k[4] = {1, c->kh, c->kw, 1}, s[4] = {1, c->sh, c->sw, 1};
  int64_t xs[4] = {c->n, c->h, c->w, c->c};
  const char *p = c->same ? "SAME" : "VALID";
  out[0] = rf_max_pool(g, NULL, in[0], k, s, p);
  out[1] = rf_avg_pool(g, NULL, in[0], k, s, p);
  const char *ops[2] = {"MaxPoolGrad", "AvgPoolGrad"};
  for (int m = 0; m < 2; m++) {
    rf_node_builder *b = rf_node_builder_new(g, ops[m], NULL);
    if (m == 0) {
      rf_node_builder_input(b, in[0]);
      rf_node_builder_input(b, out[0]);
    } else {
      rf_node_builder_input(b, sizes_const(g, xs));
    }
    rf_node_builder_input(b, in[1]);
    rf_node_builder_attr_dtype(b, "T", rf_output_dtype(in[0]));
    rf_node_builder_attr_int_list(b, "ksize", k, 4);
    rf_node_builder_attr_int_list(b, "strides", s, 4);
    rf_node_builder_attr_string(b, "padding", p);
    rf_node *node = NULL;
    assert_ok(rf_node_builder_finish(b, &node));
    out[2 + m] = (rf_output){node, 0};
  }
  return 4;
}

/* Every case, float32 and float64, with HWIO filters (`ohwi` false: cuDNN
 * through the filter transposes) or OHWI ones (cuDNN reads them as they
 * are; the direct kernels read either). */
static void conv_cases_in(bool ohwi, uint64_t seed) {
  gc_need_gpu();
  uint64_t rng = gc_rng(seed);
  gc_set *set = gc_new();
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NCASES; k++) {
      const wcase *c = &cases[k];
      int64_t oh = out_dim(c->h, c->kh, c->sh, c->dh, c->same);
      int64_t ow = out_dim(c->w, c->kw, c->sw, c->dw, c->same);
      rf_tensor *in[3] = {
          gc_random(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, c->c), -1,
                    1),
          gc_random(&rng, dts[d], filter_shape(c, ohwi), -1, 1),
          gc_random(&rng, dts[d], rf_shape_of(4, c->n, oh, ow, c->oc), -1, 1)};
      char label[64];
      snprintf(label, sizeof label, "conv case %d %s %s", k,
               rf_dtype_name(dts[d]), ohwi ? "OHWI" : "HWIO");
      /* Sums in another order: the output's of kh*kw*c terms, the input
       * gradient's of kh*kw*oc, the filter gradient's of n*oh*ow (6272 in
       * case 9). Their terms are ~0.3 and the sums may cancel to ~0.1, so
       * float32's rounding error grows with the length, not with the
       * result: measured on an H200, 1.2e-4 on a filter-gradient element
       * of -0.167 in case 9 (a missing or doubled term is off by ~0.3). */
      int64_t terms = c->n * oh * ow;
      if (c->kh * c->kw * c->c > terms) terms = c->kh * c->kw * c->c;
      if (c->kh * c->kw * c->oc > terms) terms = c->kh * c->kw * c->oc;
      double tol32 = 1e-7 * (double)terms > 1e-4 ? 1e-7 * (double)terms : 1e-4;
      gc_add(set, label, ohwi ? build_conv_ohwi : build_conv, &k, sizeof k,
             dts[d] == RF_FLOAT32 ? tol32 : 1e-11, 3, in);
    }
  gc_run(set);
}

static void test_conv(void **state) {
  (void)state;
  conv_cases_in(false, 21);
}

static void test_conv_ohwi(void **state) {
  (void)state;
  conv_cases_in(true, 25);
}

static void test_pool(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(22);
  gc_set *set = gc_new();
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NCASES; k++) {
      const wcase *c = &cases[k];
      if (c->dh != 1 || c->dw != 1) continue; /* pools have no dilation */
      int64_t oh = out_dim(c->h, c->kh, c->sh, 1, c->same);
      int64_t ow = out_dim(c->w, c->kw, c->sw, 1, c->same);
      rf_tensor *in[2] = {
          gc_random(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, c->c), -1,
                    1),
          gc_random(&rng, dts[d], rf_shape_of(4, c->n, oh, ow, c->c), -1, 1)};
      char label[64];
      snprintf(label, sizeof label, "pool case %d %s", k,
               rf_dtype_name(dts[d]));
      gc_add(set, label, build_pool, &k, sizeof k, -1, 2, in);
    }
  gc_run(set);
}

/* Builds case k with `build` over placeholders of dtype dt on `device`;
 * feeds in[] (converted to dt); the fetches go to outs. */
static int run_half_case(gc_build build, int k, rf_dtype dt, int nin,
                         rf_tensor *const *in, const char *device,
                         rf_tensor **outs, rf_status **err) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, device));
  rf_output ph[4], out[GC_MAX_OUT];
  rf_feed feeds[4];
  rf_tensor *conv[4];
  for (int i = 0; i < nin; i++) {
    rf_shape sh = rf_tensor_shape(in[i]);
    ph[i] = rf_placeholder(g, NULL, dt, sh);
    double *v = rf_test_to_doubles(in[i]);
    assert_ok(rf_tensor_new(dt, &sh, NULL, &conv[i]));
    for (int64_t j = 0; j < rf_tensor_num_elements(in[i]); j++) {
      void *d = rf_tensor_mutable_data(conv[i]);
      if (dt == RF_FLOAT64)
        ((double *)d)[j] = v[j];
      else if (dt == RF_FLOAT16)
        ((uint16_t *)d)[j] = rf_float_to_half((float)v[j]);
      else
        ((uint16_t *)d)[j] = rf_float_to_bfloat16((float)v[j]);
    }
    free(v);
    feeds[i] = (rf_feed){ph[i], conv[i]};
  }
  int nout = build(g, ph, &k, out);
  assert_ok(rf_graph_status(g));
  rf_session_options o = gc_options(strcmp(device, "cpu:0") != 0);
  rf_session *sess = NULL;
  assert_ok(rf_session_new(g, &o, &sess));
  *err = rf_session_run(sess, feeds, nin, out, nout, NULL, 0, outs);
  rf_session_free(sess);
  rf_graph_free(g);
  for (int i = 0; i < nin; i++) rf_tensor_release(conv[i]);
  return nout;
}

/* Case k of `build` in dt on the GPU against float64 on the CPU, over
 * inputs in[] whose values dt holds exactly. */
static void half_check(gc_build build, int k, rf_dtype dt, int nin,
                       rf_tensor *const *in, const char *what) {
  rf_tensor *want[GC_MAX_OUT], *have[GC_MAX_OUT];
  rf_status *err = NULL;
  int n = run_half_case(build, k, RF_FLOAT64, nin, in, "cpu:0", want, &err);
  assert_ok(err);
  run_half_case(build, k, dt, nin, in, gc_device(), have, &err);
  if (!gc_real_gpu()) { /* cpu:1 stands in: it must refuse */
    assert_status(err, RF_UNIMPLEMENTED, "runs on GPU devices only");
    for (int i = 0; i < n; i++) rf_tensor_release(want[i]);
    return;
  }
  assert_ok(err);
  /* A float sum rounded to the output dtype, within a few ulps: cuDNN's
   * algorithms may round partial sums (split-K) to it too (float16 case 9
   * was 1.8e-3 off, about two ulps, on an H200). */
  double tol = dt == RF_FLOAT16 ? 4e-3 : 8e-3;
  for (int i = 0; i < n; i++) {
    assert_int_equal(rf_tensor_dtype(have[i]), dt);
    int64_t m = rf_tensor_num_elements(want[i]);
    assert_int_equal(rf_tensor_num_elements(have[i]), m);
    for (int64_t j = 0; j < m; j++) {
      double w = rf_tensor_get(want[i], j), h = rf_tensor_get(have[i], j);
      if (fabs(h - w) > tol * (1.0 + fabs(w))) {
        fprintf(stderr,
                "%s case %d %s output %d element %lld: %.9g, want %.9g\n", what,
                k, rf_dtype_name(dt), i, (long long)j, h, w);
        fail();
      }
    }
    rf_tensor_release(want[i]);
    rf_tensor_release(have[i]);
  }
}

/* Inputs drawn in dt (so exact in it), then widened to float64. */
static rf_tensor *half_random(uint64_t *rng, rf_dtype dt, rf_shape s) {
  rf_tensor *t = gc_random(rng, dt, s, -1, 1);
  double *v = rf_test_to_doubles(t);
  rf_tensor *d;
  assert_ok(rf_tensor_new_copy(RF_FLOAT64, &s, v, &d));
  free(v);
  rf_tensor_release(t);
  return d;
}

static void test_conv_half(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(23);
  static const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NCASES; k++) {
      const wcase *c = &cases[k];
      int64_t oh = out_dim(c->h, c->kh, c->sh, c->dh, c->same);
      int64_t ow = out_dim(c->w, c->kw, c->sw, c->dw, c->same);
      for (int ohwi = 0; ohwi < 2; ohwi++) {
        rf_tensor *in[3] = {
            half_random(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, c->c)),
            half_random(&rng, dts[d], filter_shape(c, ohwi)),
            half_random(&rng, dts[d], rf_shape_of(4, c->n, oh, ow, c->oc))};
        half_check(ohwi ? build_conv_ohwi : build_conv, k, dts[d], 3, in,
                   ohwi ? "conv OHWI" : "conv");
        for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
      }
    }
}

static void test_pool_half(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(24);
  static const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NCASES; k++) {
      const wcase *c = &cases[k];
      if (c->dh != 1 || c->dw != 1) continue;
      int64_t oh = out_dim(c->h, c->kh, c->sh, 1, c->same);
      int64_t ow = out_dim(c->w, c->kw, c->sw, 1, c->same);
      rf_tensor *in[2] = {
          half_random(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, c->c)),
          half_random(&rng, dts[d], rf_shape_of(4, c->n, oh, ow, c->c))};
      half_check(build_pool, k, dts[d], 2, in, "pool");
      for (int i = 0; i < 2; i++) rf_tensor_release(in[i]);
    }
}

/* Inputs of -1, 0, 1 and NaN only: windows with ties (the gradient goes to
 * the first maximum), with NaN (it wins and passes through) and all-NaN,
 * per channel of a vector as of a scalar. */
static rf_tensor *ties_and_nans(uint64_t *rng, rf_dtype dt, rf_shape shape) {
  int64_t n = rf_shape_num_elements(&shape);
  double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  assert_true(v && f);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rf_test_rand(rng) % 8; /* NaN 1 in 8 */
    v[i] = r == 0 ? NAN : (double)(r % 3) - 1.0;
    f[i] = (float)v[i];
  }
  rf_tensor *t;
  assert_ok(rf_tensor_new_copy(
      dt, &shape, dt == RF_FLOAT64 ? (const void *)v : (const void *)f, &t));
  free(v);
  free(f);
  return t;
}

static void test_pool_ties_and_nans(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(25);
  gc_set *set = gc_new();
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NCASES; k++) {
      const wcase *c = &cases[k];
      if (c->dh != 1 || c->dw != 1) continue;
      int64_t oh = out_dim(c->h, c->kh, c->sh, 1, c->same);
      int64_t ow = out_dim(c->w, c->kw, c->sw, 1, c->same);
      rf_tensor *in[2] = {
          ties_and_nans(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, c->c)),
          gc_random(&rng, dts[d], rf_shape_of(4, c->n, oh, ow, c->c), -1, 1)};
      char label[64];
      snprintf(label, sizeof label, "pool ties/NaN case %d %s", k,
               rf_dtype_name(dts[d]));
      gc_add(set, label, build_pool, &k, sizeof k, -1, 2, in);
    }
  gc_run(set);
}

/* CPU devices have no half-precision convolution or pooling: every op of
 * the family fails the run with UNIMPLEMENTED naming the dtype and the op. */
static void test_half_on_cpu_refused(void **state) {
  (void)state;
  uint64_t rng = gc_rng(25);
  static const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16};
  const int k = 0;
  const wcase *c = &cases[k];
  for (int d = 0; d < 2; d++)
    for (int pool = 0; pool < 2; pool++) {
      int64_t oc = pool ? c->c : c->oc;
      rf_tensor *in[3] = {
          half_random(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, c->c)),
          pool ? half_random(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, oc))
               : half_random(&rng, dts[d],
                             rf_shape_of(4, c->kh, c->kw, c->c, c->oc)),
          half_random(&rng, dts[d], rf_shape_of(4, c->n, c->h, c->w, oc))};
      int nin = pool ? 2 : 3;
      if (pool) {
        rf_tensor_release(in[1]);
        in[1] = in[2];
        in[2] = NULL;
      }
      rf_tensor *outs[GC_MAX_OUT];
      rf_status *err = NULL;
      run_half_case(pool ? build_pool : build_conv, k, dts[d], nin, in, "cpu:0",
                    outs, &err);
      char want[64];
      snprintf(want, sizeof want,
               "has dtype %s, which runs on GPU devices only",
               rf_dtype_name(dts[d]));
      assert_non_null(err);
      assert_non_null(strstr(rf_status_message(err), pool ? "Pool" : "Conv2D"));
      assert_status(err, RF_UNIMPLEMENTED, want);
      for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv),
      cmocka_unit_test(test_conv_ohwi),
      cmocka_unit_test(test_pool),
      cmocka_unit_test(test_pool_ties_and_nans),
      cmocka_unit_test(test_conv_half),
      cmocka_unit_test(test_pool_half),
      cmocka_unit_test(test_half_on_cpu_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
