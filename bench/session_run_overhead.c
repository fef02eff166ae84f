/* bench/session_run_overhead.c - the host cost of one rf_session_run of a
 * tiny training-like step on cpu:0, and its library allocations.
 *
 *   bench_session_run_overhead [runs=200000] [rounds=7] [nodes=0]
 *
 * The step: feed "train/indices" (int32 [4]) and "train/x" (float32 [4]),
 * fetch "train/loss" = Sum(x * w) and run the target "train/update"
 * (w -= 0.01 * x), where w is a float32 [4] variable: a training step's
 * request (a feed or two, the loss, the update) with kernels of a few
 * elements, so what is timed is rf_session_run's own path (request lookup,
 * step setup, executor, fetch hand-back). `nodes` adds that many extra
 * Identity nodes to the graph (not in the step), so the graph's name table
 * is as large as a real model's. Prints, per round, the median and best
 * time of one run in ns and the library allocations per run
 * (rf_debug_allocation_count), then the median of the rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ringflow/debug.h"
#include "ringflow/ringflow.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void check(rf_status *st, const char *what) {
  if (!st) return;
  fprintf(stderr, "%s: %s: %s\n", what, rf_code_name(rf_status_code(st)),
          rf_status_message(st));
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 200000;
  int rounds = argc > 2 ? atoi(argv[2]) : 7;
  int extra = argc > 3 ? atoi(argv[3]) : 0;
  if (runs < 100 || rounds < 1) {
    fprintf(stderr, "usage: %s [runs>=100] [rounds>=1] [nodes>=0]\n", argv[0]);
    return 2;
  }
  rf_graph *g = rf_graph_new();
  rf_shape four = rf_shape_of(1, 4);
  rf_output idx = rf_placeholder(g, "train/indices", RF_INT32, four);
  rf_output x = rf_placeholder(g, "train/x", RF_FLOAT32, four);
  rf_output w = rf_variable(g, "train/w", RF_FLOAT32, four);
  rf_output wr = rf_read_variable(g, "train/w_read", w);
  rf_output loss =
      rf_sum(g, "train/loss", rf_mul(g, "train/xw", x, wr), NULL, -1, false);
  rf_output lr = rf_const_scalar(g, "train/lr", RF_FLOAT32, 0.01);
  rf_node *update = rf_apply_gradient_descent(g, "train/update", w, lr, x);
  rf_output zeros = rf_const_scalar(g, "train/zero", RF_FLOAT32, 0);
  rf_output fill = rf_add(g, "train/fill", rf_mul(g, "train/x0", x, zeros),
                          rf_const_scalar(g, "train/one", RF_FLOAT32, 1));
  rf_node *init = rf_assign(g, "train/init", w, fill);
  rf_output sink = rf_identity(g, "train/idx_sink", idx);
  for (int i = 0; i < extra; i++) {
    char name[64];
    snprintf(name, sizeof name, "model/layer%d/extra", i);
    rf_identity(g, name, idx);
  }
  check(rf_graph_status(g), "graph");
  rf_session *s;
  check(rf_session_new(g, NULL, &s), "session");
  rf_tensor *xv, *iv;
  float xs[4] = {1, 2, 3, 4};
  int32_t is[4] = {0, 1, 2, 3};
  check(rf_tensor_new_copy(RF_FLOAT32, &four, xs, &xv), "x");
  check(rf_tensor_new_copy(RF_INT32, &four, is, &iv), "indices");
  rf_feed feeds[2] = {{idx, iv}, {x, xv}};
  rf_output fetches[2] = {loss, sink};
  check(rf_session_run(s, &feeds[1], 1, NULL, 0, &init, 1, NULL), "init");
  double *per = malloc(sizeof(double) * (size_t)runs);
  double *med = malloc(sizeof(double) * (size_t)rounds);
  printf("# runs %d, rounds %d, extra nodes %d\n", runs, rounds, extra);
  printf("round  median_ns  best_ns  allocs_per_run\n");
  for (int r = 0; r < rounds; r++) {
    int64_t a0 = rf_debug_allocation_count();
    for (int i = 0; i < runs; i++) {
      rf_tensor *out[2];
      double t0 = now_ns();
      check(rf_session_run(s, feeds, 2, fetches, 2, &update, 1, out), "run");
      per[i] = now_ns() - t0;
      rf_tensor_release(out[0]);
      rf_tensor_release(out[1]);
    }
    int64_t a1 = rf_debug_allocation_count();
    qsort(per, (size_t)runs, sizeof *per, cmp_double);
    med[r] = per[runs / 2];
    printf("%5d  %9.0f  %7.0f  %.2f\n", r, per[runs / 2], per[0],
           (double)(a1 - a0) / runs);
  }
  qsort(med, (size_t)rounds, sizeof *med, cmp_double);
  printf("median of round medians: %.0f ns per rf_session_run\n",
         med[rounds / 2]);
  free(per);
  free(med);
  rf_tensor_release(xv);
  rf_tensor_release(iv);
  rf_session_free(s);
  rf_graph_free(g);
  return 0;
}
