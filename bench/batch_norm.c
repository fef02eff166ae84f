/* bench/batch_norm.c - one training step of BatchNorm on CPU devices:
 * forward and backward (_BatchNormGrad) of x [n, h, w, c] float32 through
 * a session, loss sum(y * y).
 *
 *   bench_batch_norm [c=32] [n=64] [hw=28] [threads=2]
 *
 * Reports the best of 5 rounds of 10 steps, in ms per step (the loss's Mul
 * and Sum and their gradients included). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ringflow/ringflow.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void check(rf_status *st, const char *what) {
  if (!st) return;
  fprintf(stderr, "%s: %s: %s\n", what, rf_code_name(rf_status_code(st)),
          rf_status_message(st));
  exit(1);
}

int main(int argc, char **argv) {
  int64_t c = argc > 1 ? atoll(argv[1]) : 32,
          n = argc > 2 ? atoll(argv[2]) : 64,
          hw = argc > 3 ? atoll(argv[3]) : 28;
  int threads = argc > 4 ? atoi(argv[4]) : 2;
  if (c < 1 || n < 1 || hw < 1 || threads < 1) {
    fprintf(stderr, "usage: bench_batch_norm [c] [n] [hw] [threads]\n");
    return 2;
  }
  rf_shape s = rf_shape_of(4, n, hw, hw, c), cs = rf_shape_of(1, c);
  rf_tensor *xt, *gt, *bt;
  check(rf_tensor_new(RF_FLOAT32, &s, NULL, &xt), "x");
  check(rf_tensor_new(RF_FLOAT32, &cs, NULL, &gt), "gamma");
  check(rf_tensor_new(RF_FLOAT32, &cs, NULL, &bt), "beta");
  float *xp = rf_tensor_mutable_data(xt), *gp = rf_tensor_mutable_data(gt),
        *bp = rf_tensor_mutable_data(bt);
  for (int64_t i = 0; i < rf_tensor_num_elements(xt); i++)
    xp[i] = (float)((i * 7919) % 1000) / 500.0f;
  for (int64_t j = 0; j < c; j++) {
    gp[j] = 1;
    bp[j] = 0;
  }
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, s);
  rf_output y = rf_batch_norm_training(g, "bn", x, rf_const(g, NULL, gt),
                                       rf_const(g, NULL, bt), 1e-3, NULL, NULL);
  rf_output l = rf_sum(g, NULL, rf_mul(g, NULL, y, y), NULL, -1, false), dx;
  check(rf_graph_status(g), "graph");
  check(rf_gradients(g, &l, 1, &x, 1, NULL, &dx), "gradients");
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = threads;
  rf_session *sess;
  check(rf_session_new(g, &o, &sess), "session");
  rf_feed f = {x, xt};
  double best = 1e300;
  for (int round = 0; round < 6; round++) {
    double t0 = now_ms();
    for (int k = 0; k < 10; k++) {
      rf_tensor *out;
      check(rf_session_run(sess, &f, 1, &dx, 1, NULL, 0, &out), "run");
      rf_tensor_release(out);
    }
    double t = (now_ms() - t0) / 10;
    if (round > 0 && t < best) best = t; /* round 0 warms up */
  }
  printf(
      "BatchNorm forward+backward, x [%lld, %lld, %lld, %lld] float32, "
      "%d threads: %.2f ms per step\n",
      (long long)n, (long long)hw, (long long)hw, (long long)c, threads, best);
  rf_session_free(sess);
  rf_graph_free(g);
  rf_tensor_release(xt);
  rf_tensor_release(gt);
  rf_tensor_release(bt);
  return 0;
}
