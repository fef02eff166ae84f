/* tests/test_gpu_conv_algos.c - the cuDNN algorithm cache of GPU
 * convolutions (kernels/cuda/conv_dnn.cu), seen through
 * rf_debug_conv_algorithm_searches: an algorithm is chosen once per (GPU,
 * op, dtype, geometry) while a GPU session lives, not again on later steps
 * or in another session made meanwhile, and chosen afresh once the last GPU
 * session is gone (the cache is emptied then). Each test uses a geometry of
 * its own, which no other test of this binary runs.
 *
 * Skips without a GPU ("GPU tests skipped: <reason>") and in builds without
 * cuDNN ("cuDNN tests skipped: ..."), where GPU convolutions are ringflow's
 * own kernels and never search. */
#include <stdio.h>

#include "ringflow/debug.h"
#include "testutil.h"

static void need_cudnn(void) {
  rf_test_need_gpu();
  if (rf_debug_conv_algorithm_searches() < 0) {
    static int told;
    if (!told++) {
      printf("cuDNN tests skipped: this build has no cuDNN\n");
      fflush(stdout);
    }
    skip();
  }
}

typedef struct conv_graph {
  rf_graph *g;
  rf_output y, dx, df;
  rf_tensor *x, *f, *dy; /* fed */
  rf_output px, pf, pdy;
} conv_graph;

/* Conv2D of x (n, 9, 11, 5) with a 3x3x5x7 filter, SAME, stride 1 (cuDNN
 * takes its symmetric padding), and both gradients, all on gpu:0. */
static conv_graph conv_graph_new(int64_t n, uint64_t *rng) {
  conv_graph c;
  c.g = rf_graph_new();
  assert_ok(rf_graph_push_device(c.g, "gpu:0"));
  rf_shape xs = rf_shape_of(4, n, (int64_t)9, (int64_t)11, (int64_t)5);
  rf_shape fs = rf_shape_of(4, (int64_t)3, (int64_t)3, (int64_t)5, (int64_t)7);
  rf_shape ys = rf_shape_of(4, n, (int64_t)9, (int64_t)11, (int64_t)7);
  c.px = rf_placeholder(c.g, "x", RF_FLOAT32, xs);
  c.pf = rf_placeholder(c.g, "f", RF_FLOAT32, fs);
  c.pdy = rf_placeholder(c.g, "dy", RF_FLOAT32, ys);
  const int64_t s[4] = {1, 1, 1, 1};
  c.y = rf_conv2d(c.g, NULL, c.px, c.pf, s, "SAME", NULL);
  c.dx = rf_conv2d_backprop_input(c.g, NULL,
                                  rf_shape_of_op(c.g, NULL, c.px, RF_INT32),
                                  c.pf, c.pdy, s, "SAME", NULL);
  c.df = rf_conv2d_backprop_filter(c.g, NULL, c.px,
                                   rf_shape_of_op(c.g, NULL, c.pf, RF_INT32),
                                   c.pdy, s, "SAME", NULL);
  assert_graph_ok(c.g);
  c.x = rf_test_random_tensor(rng, RF_FLOAT32, xs, -1, 1);
  c.f = rf_test_random_tensor(rng, RF_FLOAT32, fs, -1, 1);
  c.dy = rf_test_random_tensor(rng, RF_FLOAT32, ys, -1, 1);
  return c;
}

static void conv_graph_free(conv_graph *c) {
  rf_tensor_release(c->x);
  rf_tensor_release(c->f);
  rf_tensor_release(c->dy);
  rf_graph_free(c->g);
}

static rf_session *gpu_session(const conv_graph *c) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 1;
  rf_session *s;
  assert_ok(rf_session_new(c->g, &o, &s));
  return s;
}

/* Runs fetches[0..n) of c in s and returns how many algorithm choices the
 * run made. Feeds x and f, and dy unless only y is fetched. */
static int64_t run_counting(rf_session *s, const conv_graph *c,
                            const rf_output *fetches, int n) {
  rf_feed feeds[3] = {{c->px, c->x}, {c->pf, c->f}, {c->pdy, c->dy}};
  int nfeeds = n == 1 && fetches[0].node == c->y.node ? 2 : 3;
  rf_tensor *outs[3] = {NULL, NULL, NULL};
  int64_t before = rf_debug_conv_algorithm_searches();
  assert_ok(rf_session_run(s, feeds, nfeeds, fetches, n, NULL, 0, outs));
  for (int i = 0; i < n; i++) {
    assert_non_null(outs[i]);
    rf_tensor_release(outs[i]);
  }
  return rf_debug_conv_algorithm_searches() - before;
}

/* One choice per op the first time; none on later steps, nor in a second
 * session while the first lives; a new batch size is a new geometry. */
static void test_chosen_once_per_geometry(void **state) {
  (void)state;
  need_cudnn();
  uint64_t rng = rf_test_rng(1);
  conv_graph c = conv_graph_new(3, &rng);
  rf_session *a = gpu_session(&c);
  assert_int_equal(run_counting(a, &c, &c.y, 1), 1);
  assert_int_equal(run_counting(a, &c, &c.y, 1), 0);
  rf_output grads[2] = {c.dx, c.df};
  assert_int_equal(run_counting(a, &c, grads, 2), 2);
  rf_output all[3] = {c.y, c.dx, c.df};
  assert_int_equal(run_counting(a, &c, all, 3), 0);

  rf_session *b = gpu_session(&c); /* a still lives: the cache is kept */
  assert_int_equal(run_counting(b, &c, all, 3), 0);
  rf_session_free(b);

  conv_graph c5 = conv_graph_new(5, &rng);
  rf_session *d = gpu_session(&c5);
  assert_int_equal(run_counting(d, &c5, &c5.y, 1), 1);
  assert_int_equal(run_counting(d, &c5, &c5.y, 1), 0);
  rf_session_free(d);
  conv_graph_free(&c5);

  rf_session_free(a);
  conv_graph_free(&c);
}

/* Once every GPU session is gone the cache is emptied: the next session
 * chooses again (and once more only). */
static void test_forgotten_with_last_session(void **state) {
  (void)state;
  need_cudnn();
  uint64_t rng = rf_test_rng(2);
  conv_graph c = conv_graph_new(7, &rng);
  rf_session *a = gpu_session(&c);
  assert_int_equal(run_counting(a, &c, &c.y, 1), 1);
  rf_session_free(a);
  rf_session *b = gpu_session(&c);
  assert_int_equal(run_counting(b, &c, &c.y, 1), 1);
  assert_int_equal(run_counting(b, &c, &c.y, 1), 0);
  rf_session_free(b);
  conv_graph_free(&c);
}

/* A CPU session's convolutions never ask cuDNN. */
static void test_cpu_never_counts(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(3);
  rf_graph *g = rf_graph_new();
  rf_shape xs = rf_shape_of(4, (int64_t)2, (int64_t)6, (int64_t)6, (int64_t)3);
  rf_shape fs = rf_shape_of(4, (int64_t)3, (int64_t)3, (int64_t)3, (int64_t)4);
  rf_output px = rf_placeholder(g, "x", RF_FLOAT32, xs);
  rf_output pf = rf_placeholder(g, "f", RF_FLOAT32, fs);
  const int64_t s[4] = {1, 1, 1, 1};
  rf_output y = rf_conv2d(g, NULL, px, pf, s, "SAME", NULL);
  assert_graph_ok(g);
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32, xs, -1, 1);
  rf_tensor *f = rf_test_random_tensor(&rng, RF_FLOAT32, fs, -1, 1);
  rf_feed feeds[2] = {{px, x}, {pf, f}};
  int64_t before = rf_debug_conv_algorithm_searches();
  rf_tensor *out = NULL;
  rf_test_run(g, 1, feeds, 2, &y, 1, &out);
  assert_non_null(out);
  assert_int_equal(rf_debug_conv_algorithm_searches(), before);
  rf_tensor_release(out);
  rf_tensor_release(x);
  rf_tensor_release(f);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chosen_once_per_geometry),
      cmocka_unit_test(test_forgotten_with_last_session),
      cmocka_unit_test(test_cpu_never_counts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
