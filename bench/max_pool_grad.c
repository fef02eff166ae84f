/* bench/max_pool_grad.c - MaxPoolGrad alone on the CPU, float32 NHWC, at
 * the CNN's two pools (2x2, stride 2, SAME): 28x28x32 and 14x14x64.
 *
 *   bench_max_pool_grad [n=64] [threads=1]
 *
 * x, the pool's output and dy are fed, so each run is the one op. Reports
 * the process CPU time per run (the least load-sensitive figure on a
 * shared machine), best of 5 rounds of 10 runs after one warm-up round. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ringflow/ringflow.h"

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void check(rf_status *st, const char *what) {
  if (!st) return;
  fprintf(stderr, "%s: %s: %s\n", what, rf_code_name(rf_status_code(st)),
          rf_status_message(st));
  exit(1);
}

static rf_tensor *filled(rf_shape s, int64_t seed) {
  rf_tensor *t;
  check(rf_tensor_new(RF_FLOAT32, &s, NULL, &t), "tensor");
  float *p = rf_tensor_mutable_data(t);
  /* pseudo-random as activations are: a regular pattern makes the maxima
   * predictable and flatters branchy code */
  uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(seed + 1);
  for (int64_t i = 0; i < rf_tensor_num_elements(t); i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)(r >> 40) / (float)(1 << 24);
  }
  return t;
}

static void layer(int64_t n, int64_t hw, int64_t c, int threads) {
  int64_t k[4] = {1, 2, 2, 1}, oh = (hw + 1) / 2;
  rf_shape xs = rf_shape_of(4, n, hw, hw, c), ys = rf_shape_of(4, n, oh, oh, c);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, xs);
  rf_output y = rf_placeholder(g, "y", RF_FLOAT32, ys);
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT32, ys);
  rf_output dx = rf_max_pool_grad(g, "mg", x, y, dy, k, k, "SAME");
  check(rf_graph_status(g), "graph");
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = threads;
  rf_session *sess;
  check(rf_session_new(g, &o, &sess), "session");
  rf_tensor *xt = filled(xs, 0), *yt = filled(ys, 1), *dyt = filled(ys, 2);
  rf_feed f[3] = {{x, xt}, {y, yt}, {dy, dyt}};
  double best = 1e300;
  for (int round = 0; round < 6; round++) {
    double t0 = cpu_ms();
    for (int r = 0; r < 10; r++) {
      rf_tensor *out;
      check(rf_session_run(sess, f, 3, &dx, 1, NULL, 0, &out), "run");
      rf_tensor_release(out);
    }
    double t = (cpu_ms() - t0) / 10;
    if (round > 0 && t < best) best = t; /* round 0 warms up */
  }
  printf(
      "MaxPoolGrad 2x2/2 SAME, x [%lld, %lld, %lld, %lld] float32, %d "
      "threads: %.3f CPU ms per run\n",
      (long long)n, (long long)hw, (long long)hw, (long long)c, threads, best);
  rf_session_free(sess);
  rf_graph_free(g);
  rf_tensor_release(xt), rf_tensor_release(yt), rf_tensor_release(dyt);
}

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 64;
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  if (n < 1 || threads < 1) {
    fprintf(stderr, "usage: bench_max_pool_grad [n] [threads]\n");
    return 2;
  }
  layer(n, 28, 32, threads);
  layer(n, 14, 64, threads);
  return 0;
}
