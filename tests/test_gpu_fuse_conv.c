/* tests/test_gpu_fuse_conv.c - convolution epilogues on a GPU
 * (rf_session_options.conv_epilogues, kernels/cuda/conv.cu's
 * _FusedConv2DBiasRelu): a conv block (Conv2D -> BiasAdd -> Relu -> 2x2
 * MaxPool, a squared-sum loss) and its gradients on gpu:0, float32, on
 * fresh random data, at the geometries of `ringflow train --model cnn`
 * (28x28x1 -> 32 and 14x14x32 -> 64, 5x5 SAME: cuDNN's
 * cudnnConvolutionBiasActivationForward) and one with TensorFlow's
 * asymmetric SAME padding (4x4 window: the unfused kernels nested) and a
 * 3x3 stride-2 pool (overlapping windows: MaxPoolGrad's gather kernel;
 * the CNN's 2x2 pools take the disjoint one). With RF_CONV_EPILOGUES_GPU
 * the lowered graph holds one _FusedConv2DBiasRelu and one
 * _MaxPoolGradRelu (none with OFF); the fused run matches the same graph on
 * cpu:0 and the unfused GPU run, each element within 1e-4 of its fetch's
 * largest value (cuDNN's algorithms sum in their own order), and a step
 * replayed as a CUDA graph (gpu_graphs) gives the uncaptured fused step's
 * bits. The CNN's layers must take cuDNN's fused call (no "runs the unfused
 * kernels" warning in the log). Skips without a GPU ("GPU tests skipped: ...");
 * RF_GPU_TEST_ON_CPU=1 runs it with cpu:1 standing in for gpu:0 (and
 * RF_CONV_EPILOGUES_ALL for GPU), which checks the test itself on a machine
 * without a GPU. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

static bool on_cpu(void) {
  const char *e = getenv("RF_GPU_TEST_ON_CPU");
  return e && e[0] == '1';
}

static const char *device(void) { return on_cpu() ? "cpu:1" : "gpu:0"; }

/* Fallbacks of _FusedConv2DBiasRelu said through the log sink. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int fallbacks;

static void on_log(rf_log_level level, const char *msg, void *user) {
  (void)level, (void)user;
  if (!strstr(msg, "runs the unfused kernels")) return;
  printf("  log: %s\n", msg);
  pthread_mutex_lock(&log_mu);
  fallbacks++;
  pthread_mutex_unlock(&log_mu);
}

enum { NFETCH = 5 }; /* loss, relu, dx, df, db */

typedef struct geo {
  int64_t n, h, w, c, k, oc;
  int64_t pk, ps; /* the pool's window and stride */
} geo;

typedef struct block {
  rf_graph *g;
  rf_output x, f, b;
  rf_output fetch[NFETCH];
} block;

static void build(block *m, const geo *q, const char *dev) {
  memset(m, 0, sizeof *m);
  rf_graph *g = m->g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, dev));
  m->x = rf_placeholder(g, "x", RF_FLOAT32,
                        rf_shape_of(4, q->n, q->h, q->w, q->c));
  m->f = rf_placeholder(g, "f", RF_FLOAT32,
                        rf_shape_of(4, q->k, q->k, q->c, q->oc));
  m->b = rf_placeholder(g, "b", RF_FLOAT32, rf_shape_of(1, q->oc));
  const int64_t one[4] = {1, 1, 1, 1}, pk[4] = {1, q->pk, q->pk, 1},
                ps[4] = {1, q->ps, q->ps, 1};
  rf_output y = rf_conv2d(g, "conv", m->x, m->f, one, "SAME", NULL);
  rf_output r = rf_relu(g, "relu", rf_bias_add(g, "bias", y, m->b));
  rf_output p = rf_max_pool(g, "pool", r, pk, ps, "SAME");
  rf_output loss = rf_sum(g, "loss", rf_mul(g, NULL, p, p), NULL, -1, false);
  assert_graph_ok(g);
  rf_output xs[3] = {m->x, m->f, m->b}, dxs[3];
  assert_ok(rf_gradients(g, &loss, 1, xs, 3, NULL, dxs));
  rf_output f[NFETCH] = {loss, r, dxs[0], dxs[1], dxs[2]};
  memcpy(m->fetch, f, sizeof f);
}

static rf_session_options options(bool gpu, int mode, int graphs) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = gpu && !on_cpu() ? 1 : 0;
  o.num_cpu_devices = gpu && on_cpu() ? 2 : 1;
  o.conv_epilogues = gpu && on_cpu() && mode == RF_CONV_EPILOGUES_GPU
                         ? RF_CONV_EPILOGUES_ALL
                         : mode;
  o.gpu_graphs = graphs;
  return o;
}

/* steps runs of one session on the same inputs; out gets the last's and,
 * when first is not NULL, first and second get the first two steps'. */
static void run_keep(const block *m, rf_session_options o, rf_tensor *const *in,
                     int steps, rf_tensor **out, rf_tensor **first,
                     rf_tensor **second) {
  rf_session *s = NULL;
  assert_ok(rf_session_new(m->g, &o, &s));
  rf_feed feeds[3] = {{m->x, in[0]}, {m->f, in[1]}, {m->b, in[2]}};
  for (int t = 0; t < steps; t++) {
    if (first && t == 1) memcpy(first, out, sizeof *out * NFETCH);
    if (first && t == 2) memcpy(second, out, sizeof *out * NFETCH);
    if (t > 0 && !(first && t <= 2))
      for (int i = 0; i < NFETCH; i++) rf_tensor_release(out[i]);
    assert_ok(rf_session_run(s, feeds, 3, m->fetch, NFETCH, NULL, 0, out));
  }
  rf_session_free(s);
}

static void run(const block *m, rf_session_options o, rf_tensor *const *in,
                int steps, rf_tensor **out) {
  run_keep(m, o, in, steps, out, NULL, NULL);
}

static int count_op(const block *m, rf_session_options o, const char *op) {
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(m->g, &o, &low));
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++)
    n += strcmp(rf_node_op(rf_graph_node(low, i)), op) == 0;
  rf_graph_free(low);
  return n;
}

/* Every element of a within tol of b's, relative to b's largest value. */
static void assert_close(rf_tensor *const *a, rf_tensor *const *b,
                         const char *what) {
  for (int i = 0; i < NFETCH; i++) {
    int64_t n = rf_tensor_num_elements(b[i]);
    assert_int_equal(rf_tensor_num_elements(a[i]), n);
    double big = 1e-30;
    for (int64_t k = 0; k < n; k++)
      big = fmax(big, fabs(rf_tensor_get(b[i], k)));
    for (int64_t k = 0; k < n; k++) {
      double d = fabs(rf_tensor_get(a[i], k) - rf_tensor_get(b[i], k));
      if (d > 1e-4 * big)
        fail_msg("%s: fetch %d element %lld: %.9g against %.9g (largest %g)",
                 what, i, (long long)k, rf_tensor_get(a[i], k),
                 rf_tensor_get(b[i], k), big);
    }
  }
}

static bool same_bits(const rf_tensor *a, const rf_tensor *b) {
  return memcmp(rf_tensor_data(a), rf_tensor_data(b), rf_tensor_nbytes(a)) == 0;
}

/* A replay has an uncaptured step's bits wherever two uncaptured steps
 * agree bit for bit: cuDNN's filter gradients may add with atomics (taken
 * when the deterministic algorithms are more than 1.1x slower,
 * conv_dnn.cu), and then no two steps are alike, captured or not. */
static void assert_same_bits(rf_tensor *const *a, rf_tensor *const *b,
                             rf_tensor *const *b2) {
  for (int i = 0; i < NFETCH; i++) {
    if (!same_bits(b[i], b2[i])) {
      printf(
          "fetch %d: two uncaptured steps differ (an algorithm with "
          "atomics): compared within tolerance\n",
          i);
      continue;
    }
    if (!same_bits(a[i], b[i]))
      fail_msg("fetch %d differs between a replayed and an uncaptured step", i);
  }
}

static void release_all(rf_tensor **t) {
  for (int i = 0; i < NFETCH; i++) rf_tensor_release(t[i]);
}

/* must_fuse: no fallback may be logged (a real GPU; without cuDNN in the
 * build the kernel runs the unfused kernels without saying so). */
static void check(const geo *q, bool must_fuse) {
  if (!on_cpu()) rf_test_need_gpu();
  block gm, cm;
  build(&gm, q, device());
  build(&cm, q, "cpu:0");
  rf_session_options on = options(true, RF_CONV_EPILOGUES_GPU, 0);
  rf_session_options off = options(true, RF_CONV_EPILOGUES_OFF, 0);
  assert_int_equal(count_op(&gm, on, "_FusedConv2DBiasRelu"), 1);
  assert_int_equal(count_op(&gm, on, "_MaxPoolGradRelu"), 1);
  assert_int_equal(count_op(&gm, on, "_ReluGrad"), 0);
  assert_int_equal(count_op(&gm, off, "_FusedConv2DBiasRelu"), 0);
  assert_int_equal(count_op(&gm, off, "_MaxPoolGradRelu"), 0);
  rf_tensor *in[3] = {
      rf_test_random_tensor(&rng, RF_FLOAT32,
                            rf_shape_of(4, q->n, q->h, q->w, q->c), -1, 1),
      rf_test_random_tensor(&rng, RF_FLOAT32,
                            rf_shape_of(4, q->k, q->k, q->c, q->oc), -0.3, 0.3),
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, q->oc), -0.5,
                            0.5)};
  rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0}, *cpu[NFETCH] = {0};
  rf_tensor *replayed[NFETCH] = {0};
  pthread_mutex_lock(&log_mu);
  fallbacks = 0;
  pthread_mutex_unlock(&log_mu);
  rf_set_log_callback(RF_LOG_WARN, on_log, NULL);
  run(&gm, options(true, RF_CONV_EPILOGUES_GPU, 0), in, 1, fused);
  rf_set_log_callback(RF_LOG_WARN, NULL, NULL);
  if (must_fuse && !on_cpu()) assert_int_equal(fallbacks, 0);
  run(&gm, options(true, RF_CONV_EPILOGUES_OFF, 0), in, 1, plain);
  run(&cm, options(false, RF_CONV_EPILOGUES_OFF, 0), in, 1, cpu);
  assert_close(fused, cpu, "fused GPU against CPU");
  assert_close(fused, plain, "fused GPU against unfused GPU");
  /* Two uncaptured steps, then replays: the last a replay, the same bits as
   * the uncaptured steps of its session where those agree. Not compared
   * bit for bit with another session's: each session picks its cuDNN
   * algorithms by timing them (conv_dnn.cu). */
  rf_tensor *first[NFETCH] = {0}, *second[NFETCH] = {0};
  run_keep(&gm, options(true, RF_CONV_EPILOGUES_GPU, 1), in, 4, replayed, first,
           second);
  assert_same_bits(replayed, second, first);
  assert_close(replayed, second, "replayed against uncaptured");
  release_all(first);
  release_all(second);
  assert_close(replayed, fused, "replayed against another session's step");
  release_all(fused), release_all(plain), release_all(cpu);
  release_all(replayed);
  for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
  rf_graph_free(gm.g);
  rf_graph_free(cm.g);
}

static void test_cnn_first_layer(void **state) {
  (void)state;
  const geo q = {4, 28, 28, 1, 5, 32, 2, 2};
  check(&q, true);
}

static void test_cnn_second_layer(void **state) {
  (void)state;
  const geo q = {3, 14, 14, 32, 5, 64, 2, 2};
  check(&q, true);
}

/* SAME with a 4x4 window pads 1 before and 2 after: not cuDNN's; the
 * pool's windows overlap. */
static void test_asymmetric_padding_unfused(void **state) {
  (void)state;
  const geo q = {2, 9, 7, 3, 4, 5, 3, 2};
  check(&q, false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cnn_first_layer),
      cmocka_unit_test(test_cnn_second_layer),
      cmocka_unit_test(test_asymmetric_padding_unfused),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
