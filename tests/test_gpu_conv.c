/* tests/test_gpu_conv.c - the GPU kernels of Conv2D, Conv2DBackpropInput,
 * Conv2DBackpropFilter, MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad
 * against the CPU kernels (tests/gpu_compare.h), float32 and float64, over
 * the edge cases of test_conv_ops.c: size-1 dims, an input smaller than the
 * window, stride > window, dilation > 1, batch 0, 1x1 windows. Skips without
 * a GPU; RF_GPU_TEST_ON_CPU=1 runs it with cpu:1 standing in. */
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

/* in: x, f, dy (conv's output shape); out: y, dx, df. */
static int build_conv(rf_graph *g, const rf_output *in, const void *arg,
                      rf_output *out) {
  const wcase *c = &cases[*(const int *)arg];
  int64_t s[4] = {1, c->sh, c->sw, 1}, d[4] = {1, c->dh, c->dw, 1};
  int64_t xs[4] = {c->n, c->h, c->w, c->c}, fs[4] = {c->kh, c->kw, c->c, c->oc};
  const char *p = c->same ? "SAME" : "VALID";
  out[0] = rf_conv2d(g, NULL, in[0], in[1], s, p, d);
  out[1] = rf_conv2d_backprop_input(g, NULL, sizes_const(g, xs), in[1], in[2],
                                    s, p, d);
  out[2] = rf_conv2d_backprop_filter(g, NULL, in[0], sizes_const(g, fs), in[2],
                                     s, p, d);
  return 3;
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

static void test_conv(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(21);
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
          gc_random(&rng, dts[d], rf_shape_of(4, c->kh, c->kw, c->c, c->oc), -1,
                    1),
          gc_random(&rng, dts[d], rf_shape_of(4, c->n, oh, ow, c->oc), -1, 1)};
      char label[64];
      snprintf(label, sizeof label, "conv case %d %s", k,
               rf_dtype_name(dts[d]));
      /* sums of up to ~10^4 terms in another order */
      gc_add(set, label, build_conv, &k, sizeof k,
             dts[d] == RF_FLOAT32 ? 1e-4 : 1e-11, 3, in);
    }
  gc_run(set);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv),
      cmocka_unit_test(test_pool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
