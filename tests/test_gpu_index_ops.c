/* tests/test_gpu_index_ops.c - the GPU kernels of Gather, _GatherGrad,
 * OneHot and Select against the CPU kernels (tests/gpu_compare.h), every
 * dtype, with repeated and empty indices and broadcasting. _GatherGrad's
 * atomic sums are compared within the dtype's tolerance. Skips without a
 * GPU; RF_GPU_TEST_ON_CPU=1 runs it with cpu:1 standing in. */
#include "gpu_compare.h"

enum { GATHER, GATHER_GRAD, ONE_HOT, SELECT };

typedef struct op_arg {
  int op, axis;
  rf_dtype dt;
} op_arg;

static int build(rf_graph *g, const rf_output *in, const void *varg,
                 rf_output *out) {
  const op_arg *a = varg;
  switch (a->op) {
    case GATHER: out[0] = rf_gather(g, NULL, in[0], in[1], a->axis); return 1;
    case GATHER_GRAD: {
      rf_node_builder *b = rf_node_builder_new(g, "_GatherGrad", NULL);
      rf_node_builder_input(b, in[0]);
      rf_node_builder_input(b, in[1]);
      rf_node_builder_input(b, in[2]);
      rf_node_builder_attr_int(b, "axis", a->axis);
      rf_node *n;
      assert_ok(rf_node_builder_finish(b, &n));
      out[0] = (rf_output){n, 0};
      return 1;
    }
    case ONE_HOT:
      out[0] = rf_one_hot(g, NULL, in[0], 5, 3, -1, a->axis, a->dt);
      return 1;
    default: out[0] = rf_select(g, NULL, in[0], in[1], in[2]); return 1;
  }
}

static void test_index_ops(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(81);
  gc_set *s = gc_new();
  char label[96];
  rf_shape ps = rf_shape_of(3, 6, 5, 3);
  for (int d = 0; d < GC_COUNT(gc_all); d++) {
    rf_dtype dt = gc_all[d];
    for (int axis = 0; axis < 3; axis++)
      for (int empty = 0; empty < 2; empty++) {
        op_arg a = {GATHER, axis, dt};
        rf_shape is = empty ? rf_shape_of(2, 2, 0) : rf_shape_of(2, 4, 7);
        rf_tensor *in[3] = {
            gc_random(&rng, dt, ps, -4, 4),
            rf_test_random_tensor(&rng, axis ? RF_INT64 : RF_INT32, is, 0,
                                  (double)ps.dims[axis])};
        snprintf(label, sizeof label, "Gather axis %d %s", axis,
                 rf_dtype_name(dt));
        gc_add(s, label, build, &a, sizeof a, 0, 2, in);
        if (!rf_dtype_is_float(dt)) continue;
        a.op = GATHER_GRAD;
        rf_shape ys = rf_shape_scalar();
        for (int k = 0; k < axis; k++) ys.dims[ys.rank++] = ps.dims[k];
        for (int k = 0; k < 2; k++) ys.dims[ys.rank++] = is.dims[k];
        for (int k = axis + 1; k < 3; k++) ys.dims[ys.rank++] = ps.dims[k];
        in[0] = gc_random(&rng, dt, ys, -4, 4);
        in[1] =
            rf_test_random_tensor(&rng, RF_INT32, is, 0, (double)ps.dims[axis]);
        in[2] = gc_random(&rng, dt, ps, -4, 4);
        snprintf(label, sizeof label, "_GatherGrad axis %d %s", axis,
                 rf_dtype_name(dt));
        gc_add(s, label, build, &a, sizeof a, -1, 3, in);
      }
    for (int axis = -1; axis < 3; axis++) {
      op_arg a = {ONE_HOT, axis, dt};
      rf_tensor *in[1] = {
          rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(2, 3, 4), -1, 7)};
      snprintf(label, sizeof label, "OneHot axis %d %s", axis,
               rf_dtype_name(dt));
      gc_add(s, label, build, &a, sizeof a, 0, 1, in);
    }
    op_arg a = {SELECT, 0, dt};
    rf_tensor *in[3] = {
        rf_test_random_tensor(&rng, RF_BOOL, rf_shape_of(2, 7, 1), 0, 2),
        gc_random(&rng, dt, rf_shape_of(1, 9), -4, 4),
        gc_random(&rng, dt, rf_shape_of(3, 2, 7, 9), -4, 4)};
    snprintf(label, sizeof label, "Select %s", rf_dtype_name(dt));
    gc_add(s, label, build, &a, sizeof a, 0, 3, in);
  }
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_index_ops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
