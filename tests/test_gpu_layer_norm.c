/* tests/test_gpu_layer_norm.c - the GPU kernels of LayerNorm and
 * _LayerNormGrad against the CPU kernels (tests/gpu_compare.h) for the float
 * dtypes, over rows wider and narrower than a warp, a size-1 last axis and
 * an empty batch. Skips without a GPU; RF_GPU_TEST_ON_CPU=1 runs it with
 * cpu:1 standing in. */
#include "gpu_compare.h"

typedef struct arg {
  int grad;   /* 0 LayerNorm, 1 _LayerNormGrad */
  double eps; /* epsilon */
} arg;

static int build(rf_graph *g, const rf_output *in, const void *varg,
                 rf_output *out) {
  const arg *a = varg;
  if (!a->grad) {
    out[0] = rf_layer_norm(g, NULL, in[0], in[1], in[2], a->eps);
    return 1;
  }
  rf_node_builder *b = rf_node_builder_new(g, "_LayerNormGrad", NULL);
  for (int i = 0; i < 3; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_float(b, "epsilon", a->eps);
  rf_node *n;
  assert_ok(rf_node_builder_finish(b, &n));
  for (int i = 0; i < 3; i++) out[i] = (rf_output){n, i};
  return 3;
}

static void test_layer_norm(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(111);
  gc_set *s = gc_new();
  char label[64];
  const rf_shape shapes[] = {rf_shape_of(2, 37, 300), rf_shape_of(3, 4, 5, 7),
                             rf_shape_of(2, 9, 1), rf_shape_of(2, 0, 16)};
  /* k 4: the size-1 last axis with epsilon 0 (a variance plus epsilon of
   * 0: y is beta and dx 0 on both sides, not NaN) */
  for (int d = 0; d < GC_COUNT(gc_floats); d++)
    for (int k = 0; k < 5; k++)
      for (int grad = 0; grad < 2; grad++) {
        rf_shape sh = shapes[k < 4 ? k : 2];
        rf_shape cs = rf_shape_of(1, sh.dims[sh.rank - 1]);
        arg a = {grad, k < 4 ? 1e-5 : 0.0};
        rf_dtype dt = gc_floats[d];
        rf_tensor *in[3];
        /* LayerNorm: x, gamma, beta; _LayerNormGrad: dy, x, gamma */
        in[0] = gc_random(&rng, dt, sh, -3, 3);
        in[1] = grad ? gc_random(&rng, dt, sh, -3, 3)
                     : gc_random(&rng, dt, cs, 0.5, 2);
        in[2] = grad ? gc_random(&rng, dt, cs, 0.5, 2)
                     : gc_random(&rng, dt, cs, -1, 1);
        snprintf(label, sizeof label, "%s shape %d %s",
                 grad ? "_LayerNormGrad" : "LayerNorm", k, rf_dtype_name(dt));
        /* sums of 37 rows rounded once on both sides, in another order of
         * the lanes: a few ulps of the dtype */
        gc_add(s, label, build, &a, sizeof a, 4 * rf_test_tolerance(dt), 3, in);
      }
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layer_norm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
