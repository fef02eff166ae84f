/* bench/executor_dispatch.c - executor overhead per node and compile time.
 *
 *   bench_executor_dispatch [nodes=100000] [threads=0]   (nodes 0: compile
 *                                                          times only)
 *
 * Dispatch: a chain and a fan-out of `nodes` trivial nodes (BenchIdentity
 * forwards its input: no allocation, so the time is the executor's), plus a
 * chain of BenchAddOne (allocates a scalar per node: a cheap real kernel).
 * Reports the best of several steady-state runs, in ns per node.
 * Compile: rf__compile of a chain of 10k, 100k and 1M nodes on one device and
 * spread over 4 devices (partitioning inserts a _Send/_Recv pair per
 * crossing), best of 3 (2 at 1M) in wall-clock and process CPU time (the
 * latter less disturbed by other work on the machine), with the copy of the
 * graph it starts with timed alone, and the ratio time(1M) / time(100k) (10
 * means linear). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernel.h"
#include "ops/op_registry.h"
#include "runtime/families.h"
#include "ringflow/ringflow.h"
#include "runtime/session_internal.h"

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static void check(rf_status *st, const char *what) {
  if (!st) return;
  fprintf(stderr, "%s: %s: %s\n", what, rf_code_name(rf_status_code(st)),
          rf_status_message(st));
  exit(1);
}

/* ---- trivial ops ---- */

static rf_status *scalar_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = rf_shape_scalar();
  return NULL;
}

static const rf__op_spec specs[] = {
    {.name = "BenchConst", .outputs = "y: float64", .shape = scalar_shape},
    {.name = "BenchIdentity",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .shape = scalar_shape},
    {.name = "BenchAddOne",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .shape = scalar_shape},
    {.name = "BenchSink", .flags = RF_OP_STATEFUL},
};

static rf_status *k_const(rf__kernel_ctx *ctx) {
  rf_shape s = rf_shape_scalar();
  rf_tensor *t;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_FLOAT64, &s, &t));
  *(double *)t->data = 1;
  return NULL;
}

static rf_status *k_identity(rf__kernel_ctx *ctx) {
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static rf_status *k_add_one(rf__kernel_ctx *ctx) {
  rf_shape s = rf_shape_scalar();
  rf_tensor *t;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_FLOAT64, &s, &t));
  *(double *)t->data = *(const double *)ctx->inputs[0]->data + 1;
  return NULL;
}

static rf_status *k_sink(rf__kernel_ctx *ctx) { return NULL; }

static const rf__kernel_def kernels[] = {
    {.op = "BenchConst", .device_type = RF_DEVICE_CPU, .compute = k_const},
    {.op = "BenchIdentity",
     .device_type = RF_DEVICE_CPU,
     .compute = k_identity},
    {.op = "BenchAddOne", .device_type = RF_DEVICE_CPU, .compute = k_add_one},
    {.op = "BenchSink", .device_type = RF_DEVICE_CPU, .compute = k_sink},
};

static void register_ops(void) {
  check(rf__registry_init(), "registry");
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    check(rf__op_register(&specs[i]), "op");
    check(rf__kernel_register(&kernels[i]), "kernel");
  }
}

static rf_node *node(rf_graph *g, const char *op, rf_output *in,
                     const char *device) {
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  if (in) rf_node_builder_input(b, *in);
  if (device) rf_node_builder_device(b, device);
  rf_node *n = NULL;
  check(rf_node_builder_finish(b, &n), op);
  return n;
}

/* Const -> n x op, node i on cpu:(i / (n / ndev)) when ndev > 1. */
static rf_output build_chain(rf_graph *g, const char *op, int n, int ndev) {
  rf_output y = {node(g, "BenchConst", NULL, ndev > 1 ? "cpu:0" : NULL), 0};
  char dev[16];
  for (int i = 0; i < n; i++) {
    snprintf(dev, sizeof dev, "cpu:%d", (int)((int64_t)i * ndev / n));
    y = (rf_output){node(g, op, &y, ndev > 1 ? dev : NULL), 0};
  }
  return y;
}

/* Best ns per node over `reps` runs (after one warm-up run that compiles). */
static double time_runs(rf_session *s, const rf_output *fetch,
                        rf_node *const *target, int n, int reps) {
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    rf_tensor *out = NULL;
    double t0 = now_s();
    check(rf_session_run(s, NULL, 0, fetch, fetch ? 1 : 0, target,
                         target ? 1 : 0, &out),
          "run");
    double dt = now_s() - t0;
    rf_tensor_release(out);
    if (r > 0 && dt < best) best = dt;
  }
  return best * 1e9 / n;
}

static rf_session *session(rf_graph *g, int ndev, int threads) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ndev;
  o.num_threads = threads;
  rf_session *s = NULL;
  check(rf_session_new(g, &o, &s), "session");
  return s;
}

static void bench_dispatch(int n, int threads) {
  const char *ops[2] = {"BenchIdentity", "BenchAddOne"};
  for (int k = 0; k < 2; k++) {
    rf_graph *g = rf_graph_new();
    rf_output y = build_chain(g, ops[k], n, 1);
    rf_session *s = session(g, 1, threads);
    printf("chain   of %7d %-13s: %6.1f ns/node\n", n, ops[k],
           time_runs(s, &y, NULL, n, 10));
    rf_session_free(s);
    rf_graph_free(g);
  }
  /* Fan-out: one Const feeds n nodes, all joined by control edges into one
   * sink target. */
  rf_graph *g = rf_graph_new();
  rf_output c = {node(g, "BenchConst", NULL, NULL), 0};
  rf_node_builder *b = rf_node_builder_new(g, "BenchSink", "sink");
  for (int i = 0; i < n; i++)
    rf_node_builder_control_input(b, node(g, "BenchIdentity", &c, NULL));
  rf_node *sink = NULL;
  check(rf_node_builder_finish(b, &sink), "sink");
  rf_session *s = session(g, 1, threads);
  printf("fan-out of %7d %-13s: %6.1f ns/node\n", n, "BenchIdentity",
         time_runs(s, NULL, &sink, n, 10));
  rf_session_free(s);
  rf_graph_free(g);
  /* A chain crossing 4 devices every 1000 nodes. */
  g = rf_graph_new();
  rf_output z = {node(g, "BenchConst", NULL, "cpu:0"), 0};
  char dev[16];
  for (int i = 0; i < n; i++) {
    snprintf(dev, sizeof dev, "cpu:%d", (i / 1000) % 4);
    z = (rf_output){node(g, "BenchIdentity", &z, dev), 0};
  }
  s = session(g, 4, threads);
  printf(
      "chain   of %7d %-13s: %6.1f ns/node (4 devices, crossing every "
      "1000 nodes)\n",
      n, "BenchIdentity", time_runs(s, &z, NULL, n, 10));
  rf_session_free(s);
  rf_graph_free(g);
}

typedef struct compile_times {
  double wall, cpu, copy; /* seconds, best of the runs; copy: wall */
} compile_times;

/* rf__compile of a chain of n nodes over ndev devices, and rf__graph_copy of
 * the session's graph (a compile's first stage) alone. */
static compile_times time_compile(int n, int ndev) {
  rf_graph *g = rf_graph_new();
  rf_output y = build_chain(g, "BenchIdentity", n, ndev);
  rf_session *s = session(g, ndev, 1);
  rf_output fetch = {rf_graph_find_node(s->graph, rf_node_name(y.node)), 0};
  rf__signature sig = {NULL, 0, &fetch, 1, NULL, 0};
  compile_times best = {1e30, 1e30, 1e30};
  for (int r = 0; r < (n >= 1000000 ? 2 : 3); r++) {
    rf__plan *p = NULL;
    double t0 = now_s(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    check(rf__compile(s, &sig, &p), "compile");
    double dt = now_s() - t0, dc = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    rf__plan_free(p);
    if (dt < best.wall) best.wall = dt;
    if (dc < best.cpu) best.cpu = dc;
    rf_graph *c = NULL;
    t0 = now_s();
    check(rf__graph_copy(s->graph, &c), "copy");
    dt = now_s() - t0;
    rf_graph_free(c);
    if (dt < best.copy) best.copy = dt;
  }
  rf_session_free(s);
  rf_graph_free(g);
  return best;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100000;
  int threads = argc > 2 ? atoi(argv[2]) : 0;
  register_ops();
  if (n > 0) { /* 0: compile times only */
    printf("executor dispatch (threads=%d; best of 10 runs)\n", threads);
    bench_dispatch(n, threads);
  }
  printf(
      "compile time (rf__compile: copy, _Retval, prune, place, partition, "
      "plans; wall, process CPU, and the copy alone)\n");
  for (int ndev = 1; ndev <= 4; ndev += 3) {
    compile_times t[3];
    const int sizes[3] = {10000, 100000, 1000000};
    for (int i = 0; i < 3; i++) {
      t[i] = time_compile(sizes[i], ndev);
      printf(
          "  %7d nodes, %d device(s): %8.1f ms  (%.0f ns/node), CPU %8.1f ms, "
          "copy %7.1f ms\n",
          sizes[i], ndev, t[i].wall * 1e3, t[i].wall * 1e9 / sizes[i],
          t[i].cpu * 1e3, t[i].copy * 1e3);
    }
    printf(
        "  ratio time(1M)/time(100k) = %.2f, CPU %.2f, copy %.2f  (10 = "
        "linear)\n",
        t[2].wall / t[1].wall, t[2].cpu / t[1].cpu, t[2].copy / t[1].copy);
  }
  return 0;
}
