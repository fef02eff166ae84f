/* tests/test_gpu_fold_constants.c - constants folded at compile time
 * (passes/fold_constants.c) on a GPU device: the loss gradient of
 * mean(x * w) and OnesLike(x) on gpu:0 are bit for bit the GPU kernels'
 * results without the pass (RF_FOLD_CONSTANTS=0) and the CPU's, for every
 * float dtype and a batch whose reciprocal rounds; the folded Const sits on
 * gpu:0 in the lowered graph. Skips without a GPU; RF_GPU_TEST_ON_CPU=1
 * runs it with cpu:1 standing in. */
#include "gpu_compare.h"

#include <ringflow/gradients.h>

typedef struct built {
  rf_graph *g;
  rf_output x, w, out[2]; /* dw, ones */
} built;

static built build(const char *device, rf_dtype dt, int64_t n) {
  built b;
  b.g = rf_graph_new();
  assert_ok(rf_graph_push_device(b.g, device));
  rf_shape s = rf_shape_of(2, n, 3);
  b.x = rf_placeholder(b.g, "x", dt, s);
  b.w = rf_placeholder(b.g, "w", dt, s);
  rf_output loss =
      rf_mean(b.g, "loss", rf_mul(b.g, NULL, b.x, b.w), NULL, -1, false);
  assert_ok(rf_gradients(b.g, &loss, 1, &b.w, 1, NULL, &b.out[0]));
  b.out[1] = rf_ones_like(b.g, "ones", b.x);
  rf_graph_pop_device(b.g);
  assert_graph_ok(b.g);
  return b;
}

static void run(const built *b, int gpu, bool fold, rf_tensor *xv,
                rf_tensor *wv, rf_tensor **got) {
  if (!fold) setenv("RF_FOLD_CONSTANTS", "0", 1);
  rf_session_options o = gc_options(gpu);
  rf_session *s;
  assert_ok(rf_session_new(b->g, &o, &s));
  rf_feed feeds[2] = {{b->x, xv}, {b->w, wv}};
  assert_ok(rf_session_run(s, feeds, 2, b->out, 2, NULL, 0, got));
  rf_session_free(s);
  unsetenv("RF_FOLD_CONSTANTS");
}

static void test_folded_on_gpu(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(301);
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  const int64_t ns[] = {100, 128};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
      built gb = build(gc_device(), dts[d], ns[k]);
      built cb = build("cpu:0", dts[d], ns[k]);
      rf_shape s = rf_shape_of(2, ns[k], 3);
      rf_tensor *xv = gc_random(&rng, dts[d], s, -3, 3);
      rf_tensor *wv = gc_random(&rng, dts[d], s, -3, 3);
      rf_tensor *on[2], *off[2], *cpu[2];
      run(&gb, 1, true, xv, wv, on);
      run(&gb, 1, false, xv, wv, off);
      run(&cb, 0, true, xv, wv, cpu);
      for (int i = 0; i < 2; i++) {
        assert_same_bytes(on[i], off[i]);
        assert_same_bytes(on[i], cpu[i]);
        rf_tensor_release(on[i]);
        rf_tensor_release(off[i]);
        rf_tensor_release(cpu[i]);
      }
      /* the Consts the pass made are on the device under test */
      rf_session_options o = gc_options(1);
      rf_graph *low = NULL;
      assert_ok(rf_graph_lower(gb.g, &o, &low));
      int consts = 0;
      for (int i = 0; i < rf_graph_num_nodes(low); i++) {
        rf_node *n = rf_graph_node(low, i);
        if (!strstr(rf_node_name(n), "/folded")) continue;
        assert_string_equal(rf_node_op(n), "Const");
        assert_string_equal(rf_node_device(n), gc_device());
        consts++;
      }
      assert_int_equal(consts, 3); /* two OnesLike and the _MeanGrad */
      rf_graph_free(low);
      rf_tensor_release(xv);
      rf_tensor_release(wv);
      rf_graph_free(gb.g);
      rf_graph_free(cb.g);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_folded_on_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
