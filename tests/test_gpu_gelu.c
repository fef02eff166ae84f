/* tests/test_gpu_gelu.c - the GPU kernels of Gelu, _GeluGrad and
 * _GeluSecond (exact and tanh-approximated) against the CPU kernels
 * (tests/gpu_compare.h) for the float dtypes, and Softmax along a middle
 * axis. Skips without a GPU; RF_GPU_TEST_ON_CPU=1 runs it with cpu:1
 * standing in. */
#include "gpu_compare.h"

typedef struct arg {
  int op; /* 0 Gelu, 1 _GeluGrad, 2 _GeluSecond, 3 softmax axis 1 */
  bool approx;
} arg;

static int build(rf_graph *g, const rf_output *in, const void *varg,
                 rf_output *out) {
  const arg *a = varg;
  if (a->op == 0) {
    out[0] = rf_gelu(g, NULL, in[0], a->approx);
    return 1;
  }
  if (a->op == 3) {
    out[0] = rf_softmax_axis(g, NULL, in[0], 1);
    return 1;
  }
  rf_node_builder *b =
      rf_node_builder_new(g, a->op == 1 ? "_GeluGrad" : "_GeluSecond", NULL);
  rf_node_builder_input(b, in[0]);
  if (a->op == 1) rf_node_builder_input(b, in[1]);
  rf_node_builder_attr_bool(b, "approximate", a->approx);
  rf_node *n;
  assert_ok(rf_node_builder_finish(b, &n));
  out[0] = (rf_output){n, 0};
  return 1;
}

static void test_gelu(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(101);
  gc_set *s = gc_new();
  char label[64];
  rf_shape sh = rf_shape_of(3, 7, 33, 65);
  for (int d = 0; d < GC_COUNT(gc_floats); d++)
    for (int op = 0; op < 4; op++)
      for (int approx = 0; approx < 2; approx++) {
        arg a = {op, approx != 0};
        rf_tensor *in[2] = {gc_random(&rng, gc_floats[d], sh, -6, 6),
                            gc_random(&rng, gc_floats[d], sh, -6, 6)};
        snprintf(label, sizeof label, "gelu op %d approx %d %s", op, approx,
                 rf_dtype_name(gc_floats[d]));
        gc_add(s, label, build, &a, sizeof a, -1, op == 1 ? 2 : 1, in);
        if (op != 1) rf_tensor_release(in[1]);
      }
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gelu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
