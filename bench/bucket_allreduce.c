/* bench/bucket_allreduce.c - what gradient bucketing saves: K all-reduces of
 * float32 tensors of log-uniform random sizes in [min, max] bytes on
 * `devices` virtual CPU devices, run as one step
 *   unfused  collective_bucket_bytes 0: K collectives
 *   fused    collective_bucket_bytes = bucket (default -1,
 *            RF_BUCKET_BYTES_AUTO: 1 MiB on CPU devices, 25 MiB on GPUs)
 *   one      one all-reduce of all K tensors' bytes together
 *   inK, in1 the inputs of unfused and of one alone (below)
 * Steps of the five alternate (rounds of `steps` steps each, best round
 * reported, so a busy machine hurts all three alike). Prints per K the time
 * per step of each, fused/one, unfused/fused, and the fixed cost per
 * collective that fusing saved: (unfused - fused) / (K - buckets), and the
 * process's CPU time per step of each configuration (best round; what a
 * step costs in work on a machine that others load too) with fused/one and
 * net (below) by CPU time. Inputs
 * `const`: Consts, so a step is the collectives (and packing) alone; the
 * pack copies every input (a Const is forwarded, not made), which `one`
 * does not: const measures the one-copy-in fallback of forwarded inputs. Inputs
 * `computed`: each is c + c, a kernel run every step, as gradients are, that
 * writes straight into its slice of the bucket (runtime/executor_homes.c);
 * `one` then adds all of it too.
 *
 * Like with like: the fused step runs K producers (K Consts or K adds per
 * device), `one` runs one of K times the size, so part of fused/one is the
 * executor's cost per node of the K producers, which a real step has with
 * or without buckets. `inK` and `in1` time those inputs alone, without the
 * collectives, and `net` = (fused - inK) / (one - in1) compares what the
 * collectives themselves cost: the bucket (pack, all-reduce, unpack) against
 * one all-reduce of the same bytes.
 *
 *   bench_bucket_allreduce [devices=4] [min=4096] [max=65536] [steps=50]
 *                          [rounds=5] [bucket=-1: by kind]
 *                          [type=cpu|gpu] [inputs=const|computed]
 *                          [only=all|unfused|fused|one|inK|in1]
 *
 * only: time one configuration (for a profiler; the others print 0).
 * RF_BENCH_TRACE=DIR: after the timed rounds of each K, one more step of each
 * timed configuration is traced (rf_session_trace_next_run) into
 * DIR/K<K>_<configuration>.json; bench/bucket_trace_ops.py sums them by op.
 * RF_LOG=info (or debug) prints the library's log to stderr: each bucket
 * the pass made, and each pack's first step, in place or copied in.
 *
 * type gpu: virtual GPU devices gpu:0..devices-1 (on the physical GPUs in
 * turn; one GPU: the CUDA-kernel collectives). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringflow/collectives.h"
#include "ringflow/ringflow.h"

#define MAXK 256
#define MAXD 8
#define NC 5 /* configurations: unfused, fused, one, inK, in1 */

static const char *dev_type = "cpu";
static bool computed; /* inputs c + c, not c */

static void check(rf_status *st, const char *what) {
  if (!st) return;
  fprintf(stderr, "%s: %s\n", what, rf_status_message(st));
  exit(1);
}

static void log_to_stderr(rf_log_level level, const char *msg, void *user) {
  (void)user;
  fprintf(stderr, "%s: %s\n", rf_log_level_name(level), msg);
}

/* RF_LOG=debug|info|warn|error: the library's log to stderr. */
static void log_from_env(void) {
  const char *v = getenv("RF_LOG");
  for (int l = RF_LOG_DEBUG; v && l <= RF_LOG_ERROR; l++)
    if (strcmp(v, rf_log_level_name((rf_log_level)l)) == 0)
      check(rf_set_log_callback((rf_log_level)l, log_to_stderr, NULL), "log");
}

static double clock_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

/* CPU time of every thread of the process: what a step costs in work,
 * whatever else the machine runs (wall time on a loaded machine is mostly
 * waiting for a core). */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

typedef struct setup {
  rf_graph *g;
  rf_session *s;
  rf_feed feeds[MAXK * MAXD];
  int nfeeds;
  rf_node *targets[MAXK * MAXD];
  int ntargets;
} setup;

/* n all-reduces of counts[k] elements on `devices` devices. */
/* With reduce false the same inputs are the targets, and no collective:
 * what producing them costs alone. */
static void build(setup *x, int devices, const int64_t *counts, int n,
                  int64_t bucket, bool reduce) {
  memset(x, 0, sizeof *x);
  x->g = rf_graph_new();
  for (int k = 0; k < n; k++) {
    rf_output in[MAXD], out[MAXD];
    for (int d = 0; d < devices; d++) {
      char dev[16];
      snprintf(dev, sizeof dev, "%s:%d", dev_type, d);
      check(rf_graph_push_device(x->g, dev), "device");
      rf_shape s = rf_shape_of(1, counts[k]);
      rf_tensor *t;
      check(rf_tensor_new(RF_FLOAT32, &s, NULL, &t), "tensor");
      float *p = rf_tensor_mutable_data(t);
      for (int64_t i = 0; i < counts[k]; i++) p[i] = (float)(i % 7) - 3.0f;
      /* a Const: no feed's cost in the step, only the collectives' */
      in[d] = rf_const(x->g, NULL, t);
      if (computed) in[d] = rf_add(x->g, NULL, in[d], in[d]);
      rf_graph_pop_device(x->g);
      x->feeds[x->nfeeds++] = (rf_feed){in[d], t};
    }
    char name[32];
    snprintf(name, sizeof name, "g%d", k);
    if (reduce) rf_all_reduce_n(x->g, name, in, devices, RF_REDUCE_SUM, out);
    for (int d = 0; d < devices; d++)
      x->targets[x->ntargets++] = reduce ? out[d].node : in[d].node;
  }
  check(rf_graph_status(x->g), "graph");
  rf_session_options o;
  rf_session_options_init(&o);
  if (strcmp(dev_type, "gpu") == 0)
    o.num_gpu_devices = devices;
  else
    o.num_cpu_devices = devices;
  o.collective_bucket_bytes = bucket;
  check(rf_session_new(x->g, &o, &x->s), "session");
}

static void step(setup *x) {
  check(rf_session_run(x->s, NULL, 0, NULL, 0, x->targets, x->ntargets, NULL),
        "run");
}

static void teardown(setup *x) {
  rf_session_free(x->s);
  for (int i = 0; i < x->nfeeds; i++) rf_tensor_release(x->feeds[i].value);
  rf_graph_free(x->g);
}

int main(int argc, char **argv) {
  int devices = argc > 1 ? atoi(argv[1]) : 4;
  double lo = argc > 2 ? atof(argv[2]) : 4096,
         hi = argc > 3 ? atof(argv[3]) : 65536;
  int steps = argc > 4 ? atoi(argv[4]) : 50;
  int rounds = argc > 5 ? atoi(argv[5]) : 5;
  int64_t bucket = argc > 6 ? atoll(argv[6]) : RF_DEFAULT_BUCKET_BYTES;
  if (argc > 7) dev_type = argv[7];
  const char *inputs = argc > 8 ? argv[8] : "const";
  computed = strcmp(inputs, "computed") == 0;
  const char *only = argc > 9 ? argv[9] : "all";
  static const char *const names[NC] = {"unfused", "fused", "one", "inK",
                                        "in1"};
  bool timed[NC], any = false;
  for (int i = 0; i < NC; i++) {
    timed[i] = strcmp(only, "all") == 0 || strcmp(only, names[i]) == 0;
    any |= timed[i];
  }
  if (devices < 1 || devices > MAXD || lo < 4 || hi < lo || steps < 1 ||
      rounds < 1 || (bucket < 0 && bucket != RF_BUCKET_BYTES_AUTO) ||
      (strcmp(dev_type, "cpu") != 0 && strcmp(dev_type, "gpu") != 0) ||
      (!computed && strcmp(inputs, "const") != 0) || !any) {
    fprintf(stderr,
            "usage: %s [devices] [min] [max] [steps] [rounds] "
            "[bucket] [cpu|gpu] [const|computed] "
            "[all|unfused|fused|one|inK|in1]\n",
            argv[0]);
    return 2;
  }
  log_from_env();
  /* The size the pass fills buckets to (RF_BUCKET_BYTES_AUTO: by kind). */
  int64_t limit = bucket != RF_BUCKET_BYTES_AUTO ? bucket
                  : strcmp(dev_type, "gpu") == 0 ? RF_DEFAULT_BUCKET_BYTES_GPU
                                                 : RF_DEFAULT_BUCKET_BYTES_CPU;
  printf(
      "# %d %s devices, float32 tensors of %.0f..%.0f bytes, bucket %lld "
      "bytes%s, %s inputs, best of %d rounds of %d steps, us per step\n",
      devices, dev_type, lo, hi, (long long)limit,
      bucket == RF_BUCKET_BYTES_AUTO ? " (the default)" : "", inputs, rounds,
      steps);
  printf(
      "%5s %10s %9s %9s %9s %9s %9s %10s %6s %12s %9s %9s %9s %9s %9s "
      "%9s %8s %8s\n",
      "K", "bytes", "unfused", "fused", "one", "inK", "in1", "fused/one", "net",
      "unfused/fus", "saved/us", "cpu:unf", "cpu:fus", "cpu:one", "cpu:inK",
      "cpu:in1", "cpu:f/o", "cpu:net");
  static const int ks[] = {16, 64, 256};
  unsigned seed = 18;
  for (int ki = 0; ki < 3; ki++) {
    int K = ks[ki];
    int64_t counts[MAXK], total = 0, slices = 0, buckets = 1, in_bucket = 0;
    for (int k = 0; k < K; k++) {
      double u = (double)rand_r(&seed) / RAND_MAX;
      counts[k] = (int64_t)(exp(log(lo) + u * (log(hi) - log(lo))) / 4);
      total += counts[k];
      /* as the pass packs them: 64-byte slices, greedily */
      int64_t b = (counts[k] * 4 + 63) / 64 * 64;
      if (in_bucket && in_bucket + b > limit) buckets++, in_bucket = 0;
      in_bucket += b;
      slices += b;
    }
    if (bucket == 0) buckets = K;
    setup x[NC];
    build(&x[0], devices, counts, K, 0, true);
    build(&x[1], devices, counts, K, bucket, true);
    build(&x[2], devices, &total, 1, 0, true);
    build(&x[3], devices, counts, K, 0, false);
    build(&x[4], devices, &total, 1, 0, false);
    double best[NC] = {0}, cpu[NC] = {0};
    for (int i = 0; i < NC; i++)
      for (int w = 0; timed[i] && w < 5; w++) step(&x[i]);
    for (int i = 0; i < NC; i++)
      if (timed[i]) best[i] = cpu[i] = INFINITY;
    for (int r = 0; r < rounds; r++)
      for (int i = 0; i < NC; i++) {
        if (!timed[i]) continue;
        double t0 = now_s(), c0 = cpu_s();
        for (int s = 0; s < steps; s++) step(&x[i]);
        double us = (now_s() - t0) / steps * 1e6,
               cus = (cpu_s() - c0) / steps * 1e6;
        if (us < best[i]) best[i] = us;
        if (cus < cpu[i]) cpu[i] = cus;
      }
    const char *tdir = getenv("RF_BENCH_TRACE");
    for (int i = 0; tdir && *tdir && i < NC; i++) {
      if (!timed[i]) continue;
      char path[512];
      snprintf(path, sizeof path, "%s/K%d_%s.json", tdir, K, names[i]);
      check(rf_session_trace_next_run(x[i].s, path), "trace");
      step(&x[i]);
    }
    printf(
        "%5d %10lld %9.1f %9.1f %9.1f %9.1f %9.1f %10.2f %6.2f %12.2f "
        "%9.2f %9.1f %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f\n",
        K, (long long)total * 4, best[0], best[1], best[2], best[3], best[4],
        best[1] / best[2], (best[1] - best[3]) / (best[2] - best[4]),
        best[0] / best[1],
        K > buckets ? (best[0] - best[1]) / (double)(K - buckets) : 0.0, cpu[0],
        cpu[1], cpu[2], cpu[3], cpu[4], cpu[1] / cpu[2],
        (cpu[1] - cpu[3]) / (cpu[2] - cpu[4]));
    for (int i = 0; i < NC; i++) teardown(&x[i]);
    (void)slices;
  }
  return 0;
}
