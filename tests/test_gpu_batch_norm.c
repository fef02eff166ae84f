/* tests/test_gpu_batch_norm.c - the GPU kernels of BatchNorm,
 * BatchNormInference, _BatchNormGrad and _BatchNormInferenceGrad against
 * the CPU kernels (tests/gpu_compare.h) for the float dtypes: NHWC with
 * more channels than a block, [N, C], C = 1, batch 1, an empty batch (NaN
 * statistics where NaN). Skips without a GPU; RF_GPU_TEST_ON_CPU=1 runs it
 * with cpu:1 standing in. */
#include "gpu_compare.h"

typedef struct arg {
  int op; /* 0 BatchNorm, 1 BatchNormInference, 2 _BatchNormGrad,
             3 _BatchNormInferenceGrad */
} arg;

static const char *const op_names[] = {"BatchNorm", "BatchNormInference",
                                       "_BatchNormGrad",
                                       "_BatchNormInferenceGrad"};
static const int num_inputs[] = {3, 5, 5, 5}, num_outputs[] = {3, 1, 3, 5};

static int build(rf_graph *g, const rf_output *in, const void *varg,
                 rf_output *out) {
  const arg *a = varg;
  rf_node_builder *b = rf_node_builder_new(g, op_names[a->op], NULL);
  for (int i = 0; i < num_inputs[a->op]; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_float(b, "epsilon", 1e-3);
  rf_node *n;
  assert_ok(rf_node_builder_finish(b, &n));
  for (int i = 0; i < num_outputs[a->op]; i++) out[i] = (rf_output){n, i};
  return num_outputs[a->op];
}

static void test_batch_norm(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(121);
  gc_set *s = gc_new();
  char label[80];
  const rf_shape shapes[] = {rf_shape_of(4, 3, 5, 5, 300),
                             rf_shape_of(2, 37, 16), rf_shape_of(2, 9, 1),
                             rf_shape_of(4, 1, 1, 1, 8), rf_shape_of(2, 0, 4)};
  for (int d = 0; d < GC_COUNT(gc_floats); d++)
    for (int k = 0; k < 5; k++)
      for (int op = 0; op < 4; op++) {
        rf_shape sh = shapes[k];
        rf_shape cs = rf_shape_of(1, sh.dims[sh.rank - 1]);
        arg a = {op};
        rf_dtype dt = gc_floats[d];
        rf_tensor *in[5];
        int grad = op >= 2;
        /* forward: x, gamma, beta[, mean, variance]; gradients: dy, x,
         * gamma, then dmean, dvariance or mean, variance */
        in[0] = gc_random(&rng, dt, sh, -3, 3);
        in[1] = grad ? gc_random(&rng, dt, sh, -3, 3)
                     : gc_random(&rng, dt, cs, 0.5, 2);
        in[2] = grad ? gc_random(&rng, dt, cs, 0.5, 2)
                     : gc_random(&rng, dt, cs, -1, 1);
        in[3] = gc_random(&rng, dt, cs, -1, 1);
        in[4] = gc_random(&rng, dt, cs, 0.2, 2);
        snprintf(label, sizeof label, "%s shape %d %s", op_names[op], k,
                 rf_dtype_name(dt));
        /* the same sums in the same order on both sides; the rounding of
         * the final products may differ by an ulp or so */
        gc_add(s, label, build, &a, sizeof a, 4 * rf_test_tolerance(dt),
               num_inputs[op], in);
        for (int i = num_inputs[op]; i < 5; i++) rf_tensor_release(in[i]);
      }
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_norm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
