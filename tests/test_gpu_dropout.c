/* tests/test_gpu_dropout.c - Dropout on gpu:0 makes the decisions the
 * documented key gives (kernels/philox.h, recomputed here) for the GPU
 * device's index in the session's device list (CPU devices first, then
 * gpu:k at num_cpu_devices + k), for every float dtype, as the CPU kernel
 * does for its own (tests/test_dropout.c). Skips without a GPU;
 * RF_GPU_TEST_ON_CPU=1 runs it on cpu:1. */
#include "gpu_compare.h"
#include "kernels/philox.h"

static void test_dropout_on_gpu(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(111);
  const int64_t n = 100003; /* many blocks, a ragged end */
  for (int d = 0; d < GC_COUNT(gc_floats); d++) {
    rf_dtype dt = gc_floats[d];
    rf_graph *g = rf_graph_new();
    assert_ok(rf_graph_push_device(g, gc_device()));
    rf_output x = rf_placeholder(g, "x", dt, rf_shape_of(1, n));
    rf_output y = rf_dropout(g, "drop", x, 0.25, 1234567 + d);
    rf_graph_pop_device(g);
    assert_graph_ok(g);
    rf_session_options o = gc_options(1);
    int index = gc_on_cpu() ? 1 : o.num_cpu_devices; /* gpu:0 / cpu:1 */
    rf_session *s = NULL;
    assert_ok(rf_session_new(g, &o, &s));
    rf_tensor *tx = gc_random(&rng, dt, rf_shape_of(1, n), 0.5, 2);
    rf_feed f = {x, tx};
    rf_output fetch[2] = {y, {y.node, 1}};
    for (int step = 1; step <= 2; step++) {
      rf_tensor *got[2];
      assert_ok(rf_session_run(s, &f, 1, fetch, 2, NULL, 0, got));
      for (int64_t i = 0; i < n; i++) {
        bool keep = rf__dropout_keep(1234567 + d, step, index, i, 0.25);
        double m = rf_tensor_get(got[1], i), v = rf_tensor_get(got[0], i);
        double want = keep ? rf_tensor_get(tx, i) / 0.75 : 0;
        if ((m != 0) != keep ||
            fabs(v - want) > rf_test_tolerance(dt) * (1 + fabs(want)))
          fail_msg("%s step %d element %lld: mask %g y %g, keep %d want %g",
                   rf_dtype_name(dt), step, (long long)i, m, v, keep, want);
      }
      rf_tensor_release(got[0]);
      rf_tensor_release(got[1]);
    }
    rf_tensor_release(tx);
    rf_session_free(s);
    rf_graph_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dropout_on_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
