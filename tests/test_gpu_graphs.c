/* tests/test_gpu_graphs.c - steps replayed as CUDA graphs
 * (rf_session_options.gpu_graphs; the decision alone, without a GPU:
 * test_step_graph_policy.c). On a GPU: MLP training steps (`ringflow train`'s
 * graph: Adam, loss fetched, new batch and learning rate every step) on gpu:0
 * and on virtual gpu:0-3 with all-reduce (a small MLP, and `ringflow train`'s
 * own at batch 128; Adam's beta powers advanced on the devices by AssignMul,
 * in place, so the step is captured) give bit-identical losses and parameters
 * with and without graphs, and the log says the step was captured; a shape
 * change falls back (the log says so) and is then captured anew; a step that
 * fails during its capture or its replay (out of memory, injected) is reported
 * and the session goes on with the right values; a CPU device in the step runs
 * without the graph and the log says why; AddN of more inputs than a launch's
 * parameters hold (their pointers in a device array) is captured and its
 * replays read this step's inputs.
 * GPU tests print "GPU tests skipped: <reason>" without a GPU. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#include "ringflow/debug.h"
#include "ringflow/log.h"
#include "testutil.h"

/* ---- the log ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 16];
static size_t log_len;

static void on_log(rf_log_level level, const char *msg, void *user) {
  (void)level;
  (void)user;
  if (strncmp(msg, "gpu graphs:", 11) != 0 && strncmp(msg, "gpu: ", 5) != 0)
    return;
  pthread_mutex_lock(&log_mu);
  int n = snprintf(log_text + log_len, sizeof log_text - log_len, "%s\n", msg);
  if (n > 0 && log_len + (size_t)n < sizeof log_text) log_len += (size_t)n;
  pthread_mutex_unlock(&log_mu);
}

static void log_start(void) {
  pthread_mutex_lock(&log_mu);
  log_len = 0;
  log_text[0] = '\0';
  pthread_mutex_unlock(&log_mu);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, on_log, NULL));
}

/* Whether the log since log_start holds sub; the log is printed if not
 * expected. */
static bool logged(const char *sub) {
  pthread_mutex_lock(&log_mu);
  bool yes = strstr(log_text, sub) != NULL;
  pthread_mutex_unlock(&log_mu);
  return yes;
}

static void log_stop(void) {
  assert_ok(rf_set_log_callback(RF_LOG_INFO, NULL, NULL));
}

static void expect_log(const char *sub, bool want) {
  if (logged(sub) != want) {
    fprintf(stderr, "log:\n%s", log_text);
    fail_msg("the log %s \"%s\"", want ? "lacks" : "holds", sub);
  }
}

/* The copy nodes of the graph captured since log_start, from its log line
 * ("N nodes: K kernels, C copies, ..."); SIZE_MAX when none was logged. */
static size_t graph_copies(void) {
  pthread_mutex_lock(&log_mu);
  const char *p = strstr(log_text, " kernels, ");
  size_t copies = SIZE_MAX;
  if (p && sscanf(p, " kernels, %zu copies", &copies) != 1) copies = SIZE_MAX;
  pthread_mutex_unlock(&log_mu);
  return copies;
}

/* A session of g on gpu:0 with CUDA graphs on. */
static rf_session *graphed_session(const rf_graph *g) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 1;
  o.gpu_graphs = 1;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static rf_tensor *zeros(int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  rf_shape sh = rf_shape_make(2, dims);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &sh, NULL, &t));
  memset(rf_tensor_mutable_data(t), 0, rf_tensor_nbytes(t));
  return t;
}

/* ---- MLP training on GPUs ---- */

enum { IN = 24, HID = 16, CLASSES = 10, STEPS = 7 };

typedef struct run_result {
  float loss[STEPS][8];
  rf_tensor *params[8 * 2 * MLP_MAX_LAYERS];
  int nparams;
} run_result;

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static rf_tensor *scalar(double v) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT32, v, &t));
  return t;
}

/* Trains `ringflow train`'s MLP (IN-HID-CLASSES, or with full its own
 * 784-512-256-10 at a global batch of `batch`, 0: 128; Adam, all-reduce) on
 * gpu:0..ndev-1 for STEPS steps of fresh random batches, graphs on or off;
 * fills r with every step's losses and the final parameters. With
 * fail_at > 0, the step after step fail_at (1-based) starts from the
 * initial state again, and with inject step fail_at runs with the k-th
 * allocation failing for k = 1, 2, ... until it succeeds (each failure must
 * be RESOURCE_EXHAUSTED; a failed step may have applied some updates, as
 * without graphs: hence the reset). */
static void train(int ndev, int graphs, int fail_at, bool inject, bool full,
                  int batch, run_result *r) {
  mlp_config cfg = {.model = MODEL_MLP,
                    .num_devices = ndev,
                    .num_layers = full ? 3 : 2,
                    .sizes = {IN, HID, CLASSES},
                    .device_batch = full ? 32 : 8,
                    .sync = SYNC_ALLREDUCE,
                    .lr = 0.01,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .epsilon = 1e-7};
  if (full) { /* `ringflow train`'s model and batch 128 */
    int sizes[4] = {784, 512, 256, 10};
    memcpy(cfg.sizes, sizes, sizeof sizes);
    cfg.device_batch = (batch ? batch : 128) / ndev;
  }
  const int in = cfg.sizes[0], rows = cfg.device_batch;
  for (int d = 0; d < ndev; d++)
    snprintf(cfg.devices[d], sizeof cfg.devices[d], "gpu:%d", d);
  mlp_graph m;
  assert_ok(mlp_build(&cfg, &m));
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = ndev;
  o.num_threads = full ? 0 : 2; /* full: one thread a core, as the tool */
  o.gpu_graphs = graphs;
  rf_session *s = NULL;
  assert_ok(rf_session_new(m.g, &o, &s));
  rf_tensor *state[3][2 * MLP_MAX_LAYERS];
  assert_ok(mlp_initial_values(&cfg, 5, state[0]));
  assert_ok(mlp_zero_moments(&cfg, state[1]));
  rf_feed init[8 * (3 * 2 * MLP_MAX_LAYERS + 2)];
  rf_tensor *power[2]; /* beta^0: Adam's beta powers start on the devices */
  assert_ok(mlp_beta_powers(&cfg, 0, power));
  int ni = 0;
  for (int d = 0; d < ndev; d++) {
    for (int k = 0; k < 3; k++)
      for (int p = 0; p < m.num_params; p++)
        init[ni++] = (rf_feed){m.rep[d].init[k][p], state[k < 2 ? k : 1][p]};
    for (int k = 0; k < 2; k++)
      init[ni++] = (rf_feed){m.rep[d].power_init[k], power[k]};
  }
  assert_ok(rf_session_run(s, init, ni, NULL, 0, &m.init_op, 1, NULL));
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (int step = 0; step < STEPS; step++) {
    if (fail_at && step == fail_at) /* fail_at is 1-based: the next step */
      assert_ok(rf_session_run(s, init, ni, NULL, 0, &m.init_op, 1, NULL));
    rf_feed feeds[3 * 8];
    rf_output fetches[8];
    rf_tensor *x[8], *y[8], *lossv[8];
    rf_tensor *lr = scalar(0.01 / (1 + step));
    for (int d = 0; d < ndev; d++) {
      int64_t xd[2] = {rows, in}, yd[1] = {rows};
      rf_shape xs = rf_shape_make(2, xd), ys = rf_shape_make(1, yd);
      assert_ok(rf_tensor_new(RF_FLOAT32, &xs, NULL, &x[d]));
      assert_ok(rf_tensor_new(RF_INT32, &ys, NULL, &y[d]));
      float *xp = rf_tensor_mutable_data(x[d]);
      int32_t *yp = rf_tensor_mutable_data(y[d]);
      for (int i = 0; i < rows * in; i++)
        xp[i] = (float)(next_rand(&rng) % 1000) / 1000.0f;
      for (int i = 0; i < rows; i++)
        yp[i] = (int32_t)(next_rand(&rng) % CLASSES);
      const mlp_replica *rep = &m.rep[d];
      feeds[3 * d] = (rf_feed){rep->x, x[d]};
      feeds[3 * d + 1] = (rf_feed){rep->y, y[d]};
      feeds[3 * d + 2] = (rf_feed){rep->lr, lr};
      fetches[d] = rep->loss;
    }
    rf_status *st = NULL;
    for (int64_t k = 1; inject && step + 1 == fail_at; k++) {
      rf_debug_fail_allocation_once(k);
      st = rf_session_run(s, feeds, 3 * ndev, fetches, ndev, &m.train_op, 1,
                          lossv);
      rf_debug_fail_allocation_once(0);
      if (!st) break;
      assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
      rf_status_free(st);
      assert_true(k < 100000);
    }
    if (!inject || step + 1 != fail_at)
      assert_ok(rf_session_run(s, feeds, 3 * ndev, fetches, ndev, &m.train_op,
                               1, lossv));
    for (int d = 0; d < ndev; d++) {
      r->loss[step][d] = ((const float *)rf_tensor_data(lossv[d]))[0];
      rf_tensor_release(lossv[d]);
      rf_tensor_release(x[d]);
      rf_tensor_release(y[d]);
    }
    rf_tensor_release(lr);
  }
  rf_tensor_release(power[0]);
  rf_tensor_release(power[1]);
  for (int k = 0; k < 2; k++)
    for (int p = 0; p < m.num_params; p++) rf_tensor_release(state[k][p]);
  rf_output reads[8 * 2 * MLP_MAX_LAYERS];
  r->nparams = 0;
  for (int d = 0; d < ndev; d++)
    for (int p = 0; p < m.num_params; p++)
      reads[r->nparams++] = m.rep[d].params[p];
  assert_ok(rf_session_run(s, NULL, 0, reads, r->nparams, NULL, 0, r->params));
  rf_session_free(s);
  mlp_free(&m);
}

/* skip: a step whose losses are not compared (0: none; 1-based). */
static void expect_identical(run_result *a, run_result *b, int ndev, int skip) {
  for (int step = 0; step < STEPS; step++)
    for (int d = 0; d < ndev && step + 1 != skip; d++)
      if (memcmp(&a->loss[step][d], &b->loss[step][d], sizeof(float)))
        fail_msg("step %d, gpu:%d: loss %.9g with graphs, %.9g without", step,
                 d, (double)b->loss[step][d], (double)a->loss[step][d]);
  assert_int_equal(a->nparams, b->nparams);
  for (int i = 0; i < a->nparams; i++) {
    assert_int_equal(rf_tensor_nbytes(a->params[i]),
                     rf_tensor_nbytes(b->params[i]));
    if (memcmp(rf_tensor_data(a->params[i]), rf_tensor_data(b->params[i]),
               rf_tensor_nbytes(a->params[i])))
      fail_msg("parameter %d differs with graphs", i);
    rf_tensor_release(a->params[i]);
    rf_tensor_release(b->params[i]);
  }
}

static void check_graphed(run_result *plain, run_result *graphed, int ndev) {
  if (logged("on several physical GPUs")) {
    /* gpu:i runs on GPU i % G: with several GPUs the step's collectives go
     * through NCCL across them, which a capture does not take (yet). */
    expect_log("gpu graphs: captured the step", false);
  } else {
    expect_log("gpu graphs: captured the step", true);
    expect_log("not captured", false);
  }
  expect_identical(plain, graphed, ndev, 0);
}

/* `captures` times: a run with graphs (a session of its own, so its step
 * is captured anew) against one without. */
/* The kernels of the graph captured since log_start and the most of them
 * on one dependent path, from its log line ("N nodes: K kernels, ...; at
 * most C kernels on one path"); false when no such line was logged. */
static bool graph_chain(size_t *kernels, size_t *chain) {
  pthread_mutex_lock(&log_mu);
  const char *k = strstr(log_text, " nodes: ");
  const char *c = strstr(log_text, "; at most ");
  bool ok = k && c && sscanf(k, " nodes: %zu kernels", kernels) == 1 &&
            sscanf(c, "; at most %zu kernels on one path", chain) == 1;
  pthread_mutex_unlock(&log_mu);
  return ok;
}

static void mlp_bit_identical_n(int ndev, bool full, int batch, int captures) {
  rf_test_need_gpu();
  static run_result plain, graphed;
  for (int c = 0; c < captures; c++) {
    train(ndev, 0, 0, false, full, batch, &plain);
    log_start();
    train(ndev, 1, 0, false, full, batch, &graphed);
    log_stop();
    check_graphed(&plain, &graphed, ndev);
    /* The devices' kernels are independent up to their all-reduce: the
     * longest dependent chain holds well under all of them. */
    size_t kernels = 0, chain = 0;
    if (!graph_chain(&kernels, &chain))
      fail_msg("no captured step's node counts in the log:\n%s", log_text);
    assert_true(chain > 0 && chain <= kernels);
    if (ndev > 1 && chain * 2 >= kernels)
      fail_msg("%d devices: %zu of the step's %zu kernels on one path", ndev,
               chain, kernels);
  }
}

static void mlp_bit_identical(int ndev, bool full) {
  mlp_bit_identical_n(ndev, full, 0, 1);
}

static void test_mlp_gpu0(void **state) {
  (void)state;
  mlp_bit_identical(1, false);
}

static void test_mlp_gpu0_3_allreduce(void **state) {
  (void)state;
  mlp_bit_identical(4, false);
}

/* `ringflow train --devices gpu:0-3 --batch 128`'s step (784-512-256-10,
 * one pool thread a core): its first launch faulted on the H200
 * (docs/PERFORMANCE.md, "CUDA graphs of steps"). */
static void test_mlp_gpu0_3_full_size(void **state) {
  (void)state;
  mlp_bit_identical(4, true);
}

/* `ringflow train --bench --devices gpu:0-7 --batch 1024 --gpu-graphs on`'s
 * step, captured 3 times: 13 of 16 such runs faulted on the H200
 * (cudaErrorIllegalAddress) while the CUDA-kernel collectives and _Retval
 * enqueued on streams whose device was inside a cuBLAS call (device.h:
 * capture_mu). */
static void test_mlp_gpu0_7_batch_1024(void **state) {
  (void)state;
  mlp_bit_identical_n(8, true, 1024, 3);
}

/* Out of memory while the step is captured (step 2 is the capture) and
 * while it is replayed (step 4): each failure is reported, and the run
 * that follows and every later step match a session without graphs. */
static void test_errors_in_capture_and_replay(void **state) {
  (void)state;
  rf_test_need_gpu();
  static run_result plain, failed;
  for (int at = 2; at <= 4; at += 2) {
    train(1, 0, at, false, false, 0, &plain); /* the same reset, no failure */
    log_start();
    train(1, 1, at, true, false, 0, &failed);
    log_stop();
    expect_log("gpu graphs: captured the step", true);
    expect_identical(&plain, &failed, 1, at);
  }
}

/* ---- fallbacks on a GPU ---- */

/* y = 2x + 1 over rows of 4, on `dev`; z = -y on zdev. */
static void test_shape_change_falls_back(void **state) {
  (void)state;
  rf_test_need_gpu();
  int64_t dims[2] = {-1, 4};
  rf_shape sh = rf_shape_make(2, dims);
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "gpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, sh);
  rf_output two = rf_const_scalar(g, "two", RF_FLOAT32, 2.0);
  rf_output one = rf_const_scalar(g, "one", RF_FLOAT32, 1.0);
  rf_output y = rf_add(g, "y", rf_mul(g, "x2", x, two), one);
  rf_graph_pop_device(g);
  rf_session *s = graphed_session(g);
  log_start();
  const int64_t rows[] = {3, 3, 3, 3, 5, 5, 5, 3};
  uint64_t rng = 77;
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    rf_tensor *v = zeros(rows[k], 4), *out = NULL;
    float *p = rf_tensor_mutable_data(v);
    for (int64_t i = 0; i < rows[k] * 4; i++)
      p[i] = (float)(int)(next_rand(&rng) % 100) - 50.0f;
    rf_feed f = {x, v};
    assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
    assert_int_equal(rf_tensor_shape(out).dims[0], rows[k]);
    const float *q = rf_tensor_data(out);
    for (int64_t i = 0; i < rows[k] * 4; i++) assert_true(q[i] == 2 * p[i] + 1);
    rf_tensor_release(out);
    rf_tensor_release(v);
    if (k == 3) expect_log("captured the step", true);
    if (k == 4)
      expect_log("feed 0 has shape (5, 4), the graph was captured with (3, 4)",
                 true);
  }
  expect_log("feed 0 has shape (3, 4), the graph was captured with (5, 4)",
             true);
  log_stop();
  rf_session_free(s);
  rf_graph_free(g);
}

/* Feeds and fetches of 1 byte to past 16 KiB (small copies between pinned
 * memory and the GPU run as kernels: device/gpu/stream.c), odd sizes
 * included, through a captured step and its replays, with and without
 * RF_GPU_SMALL_COPY=0: y = x + 1 (uint8, wrapping), every byte right. */
static void test_small_copies_replayed(void **state) {
  (void)state;
  rf_test_need_gpu();
  const int64_t sizes[] = {1, 7, 4096, 16383, 16384, 16385, 70001};
  for (int off = 0; off < 2; off++) {
    if (off) setenv("RF_GPU_SMALL_COPY", "0", 1);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      rf_graph *g = rf_graph_new();
      assert_ok(rf_graph_push_device(g, "gpu:0"));
      rf_shape sh = rf_shape_of(1, sizes[k]);
      rf_output x = rf_placeholder(g, "x", RF_UINT8, sh);
      rf_output y = rf_add(g, "y", x, rf_const_scalar(g, "one", RF_UINT8, 1));
      rf_graph_pop_device(g);
      rf_session *s = graphed_session(g);
      log_start();
      uint64_t rng = 501 + k;
      for (int step = 0; step < 4; step++) {
        rf_tensor *v = NULL, *out = NULL;
        assert_ok(rf_tensor_new(RF_UINT8, &sh, NULL, &v));
        uint8_t *p = rf_tensor_mutable_data(v);
        for (int64_t i = 0; i < sizes[k]; i++) p[i] = (uint8_t)next_rand(&rng);
        rf_feed f = {x, v};
        assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
        const uint8_t *q = rf_tensor_data(out);
        for (int64_t i = 0; i < sizes[k]; i++)
          if (q[i] != (uint8_t)(p[i] + 1))
            fail_msg("%lld bytes, step %d: byte %lld is %d, want %d",
                     (long long)sizes[k], step, (long long)i, q[i],
                     (uint8_t)(p[i] + 1));
        rf_tensor_release(out);
        rf_tensor_release(v);
      }
      expect_log("captured the step", true);
      /* The graph's copies: the feed's and the fetch's are kernels when
       * small and on, memcpy nodes otherwise (the switch is read when the
       * session's GPU runtime is made). */
      bool kernels = !off && sizes[k] <= 16384;
      size_t copies = graph_copies();
      if (kernels ? copies != 0 : copies < 2 || copies == SIZE_MAX)
        fail_msg("%lld bytes, small copies %s: %zu copy nodes, want %s",
                 (long long)sizes[k], off ? "off" : "on", copies,
                 kernels ? "0" : "the feed's and the fetch's");
      log_stop();
      rf_session_free(s);
      rf_graph_free(g);
    }
    unsetenv("RF_GPU_SMALL_COPY");
  }
}

/* y = AddN(x * 1, x * 2, ..., x * 40) = 820 x on gpu:0: more inputs than
 * AddN passes in its launch's parameters (32). Their pointers used to be
 * copied from a host array freed at once, which a capture recorded and each
 * replay read; now the step is captured and every replay sums the inputs
 * of its own step (exact: small integers). */
static void test_add_n_many_inputs(void **state) {
  (void)state;
  rf_test_need_gpu();
  enum { K = 40 };
  int64_t dims[2] = {3, 5};
  rf_shape sh = rf_shape_make(2, dims);
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "gpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, sh);
  rf_output terms[K];
  for (int k = 0; k < K; k++) {
    char name[32];
    snprintf(name, sizeof name, "c%d", k);
    rf_output c = rf_const_scalar(g, name, RF_FLOAT32, k + 1);
    snprintf(name, sizeof name, "t%d", k);
    terms[k] = rf_mul(g, name, x, c);
  }
  rf_output y = rf_add_n(g, "y", terms, K);
  rf_graph_pop_device(g);
  rf_session *s = graphed_session(g);
  log_start();
  uint64_t rng = 91;
  for (int step = 0; step < 6; step++) {
    rf_tensor *v = zeros(3, 5), *out = NULL;
    float *p = rf_tensor_mutable_data(v);
    for (int i = 0; i < 15; i++)
      p[i] = (float)(int)(next_rand(&rng) % 200) - 100.0f;
    rf_feed f = {x, v};
    assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
    const float *q = rf_tensor_data(out);
    for (int i = 0; i < 15; i++)
      if (q[i] != 820.0f * p[i])
        fail_msg("step %d, element %d: %g, expected %g", step, i, (double)q[i],
                 820.0 * p[i]);
    rf_tensor_release(out);
    rf_tensor_release(v);
  }
  log_stop();
  expect_log("gpu graphs: captured the step", true);
  expect_log("not captured", false);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_cpu_device_falls_back(void **state) {
  (void)state;
  rf_test_need_gpu();
  int64_t dims[1] = {6};
  rf_shape sh = rf_shape_make(1, dims);
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, sh);
  rf_output y = rf_neg(g, "y", x);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "gpu:0"));
  rf_output z = rf_neg(g, "z", y);
  rf_graph_pop_device(g);
  rf_session *s = graphed_session(g);
  log_start();
  for (int k = 0; k < 3; k++) {
    rf_tensor *v = NULL, *out = NULL;
    assert_ok(rf_tensor_new(RF_FLOAT32, &sh, NULL, &v));
    memset(rf_tensor_mutable_data(v), 0, rf_tensor_nbytes(v));
    ((float *)rf_tensor_mutable_data(v))[k] = (float)k + 0.5f;
    rf_feed f = {x, v};
    assert_ok(rf_session_run(s, &f, 1, &z, 1, NULL, 0, &out));
    assert_true(((const float *)rf_tensor_data(out))[k] == (float)k + 0.5f);
    rf_tensor_release(out);
    rf_tensor_release(v);
  }
  log_stop();
  expect_log("is not captured: a CPU device in the step (cpu:0 runs", true);
  expect_log("captured the step", false);
  rf_session_free(s);
  rf_graph_free(g);
}

/* RF_GPU_BLAS_WORKSPACE=BYTES (docs/ARCHITECTURE.md): 0 and 4294967296 are
 * taken (a step runs and is right), anything else is INVALID_ARGUMENT from
 * rf_session_new naming the variable; unset, the default. */
static void test_blas_workspace_variable(void **state) {
  (void)state;
  rf_test_need_gpu();
  int64_t dims[2] = {4, 4};
  rf_shape sh = rf_shape_make(2, dims);
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "gpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, sh);
  rf_output y = rf_matmul(g, "y", x, x, false, false);
  rf_graph_pop_device(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 1;
  o.gpu_graphs = 1;
  static const char *const good[] = {"0", "4294967296", "1048576"};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(setenv("RF_GPU_BLAS_WORKSPACE", good[k], 1), 0);
    rf_session *s = NULL;
    assert_ok(rf_session_new(g, &o, &s));
    rf_tensor *v = NULL, *out = NULL;
    assert_ok(rf_tensor_new(RF_FLOAT32, &sh, NULL, &v));
    for (int i = 0; i < 16; i++)
      ((float *)rf_tensor_mutable_data(v))[i] = (float)(i % 5) - 2.0f;
    rf_feed f = {x, v};
    for (int step = 0; step < 3; step++) {
      assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
      const float *a = rf_tensor_data(v), *c = rf_tensor_data(out);
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          float want = 0;
          for (int t = 0; t < 4; t++) want += a[i * 4 + t] * a[t * 4 + j];
          assert_true(c[i * 4 + j] == want); /* small integers: exact */
        }
      rf_tensor_release(out);
    }
    rf_tensor_release(v);
    rf_session_free(s);
  }
  static const char *const bad[] = {"",    "-1",  "4294967297",
                                    "12k", "1e6", "99999999999999999999999"};
  for (int k = 0; k < 6; k++) {
    assert_int_equal(setenv("RF_GPU_BLAS_WORKSPACE", bad[k], 1), 0);
    rf_session *s = NULL;
    assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                  "RF_GPU_BLAS_WORKSPACE");
    assert_null(s);
  }
  assert_int_equal(unsetenv("RF_GPU_BLAS_WORKSPACE"), 0);
  rf_graph_free(g);
}

/* The GPU runtime's measuring knobs (docs/ARCHITECTURE.md): values they
 * take, values that fail rf_session_new naming the variable, and the SM
 * share of virtual devices on one GPU, as the log reports it. */
static void test_gpu_knobs(void **state) {
  (void)state;
  rf_test_need_gpu();
  rf_graph *g = rf_graph_new();
  rf_output y[4];
  int64_t dims[2] = {64, 64};
  rf_shape sh = rf_shape_make(2, dims);
  for (int d = 0; d < 4; d++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "gpu:%d", d);
    snprintf(name, sizeof name, "y%d", d);
    assert_ok(rf_graph_push_device(g, dev));
    rf_tensor *v = NULL;
    assert_ok(rf_tensor_new(RF_FLOAT32, &sh, NULL, &v));
    float *p = rf_tensor_mutable_data(v);
    for (int i = 0; i < 64 * 64; i++) p[i] = 0.5f;
    rf_output x = rf_const(g, NULL, v);
    rf_tensor_release(v);
    y[d] = rf_matmul(g, name, x, x, false, false);
    rf_graph_pop_device(g);
  }
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 4;
  static const struct {
    const char *name, *value;
    bool ok;
  } cases[] = {
      {"RF_GPU_SM_SHARE", "0", true},
      {"RF_GPU_SM_SHARE", "1", true},
      {"RF_GPU_SM_SHARE", "", false},
      {"RF_GPU_SM_SHARE", "2", false},
      {"RF_GPU_SMALL_COPY", "0", true},
      {"RF_GPU_SMALL_COPY", "no", false},
      {"RF_GPU_UPDATE_CHUNK", "256", true},
      {"RF_GPU_UPDATE_CHUNK", "1048576", true},
      {"RF_GPU_UPDATE_CHUNK", "0", false},
      {"RF_GPU_UPDATE_CHUNK", "300", false},
      {"RF_GPU_UPDATE_CHUNK", "1048832", false},
      {"RF_GPU_UPDATE_CHUNK", "5e2", false},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    assert_int_equal(setenv(cases[k].name, cases[k].value, 1), 0);
    rf_session *s = NULL;
    log_start();
    rf_status *st = rf_session_new(g, &o, &s);
    log_stop();
    if (!cases[k].ok) {
      assert_status(st, RF_INVALID_ARGUMENT, cases[k].name);
      assert_null(s);
    } else {
      assert_ok(st);
      bool share = strcmp(cases[k].name, "RF_GPU_SM_SHARE") != 0 ||
                   strcmp(cases[k].value, "0") != 0;
      expect_log("gpu: 4 virtual devices on physical GPU 0", true);
      /* Each device plans for a quarter of the GPU, or for all of it. */
      int sms = 0, each = 0;
      pthread_mutex_lock(&log_mu);
      const char *at = strstr(log_text, "multiprocessors), each");
      const char *open = at;
      while (open && open > log_text && *open != ',') open--;
      bool parsed = open && sscanf(open,
                                   ", %d multiprocessors), each sizing "
                                   "its kernels for %d",
                                   &sms, &each) == 2;
      pthread_mutex_unlock(&log_mu);
      assert_true(parsed);
      assert_int_equal(each, share ? (sms / 4 > 0 ? sms / 4 : 1) : sms);
      rf_tensor *out[4] = {0};
      assert_ok(rf_session_run(s, NULL, 0, y, 4, NULL, 0, out));
      for (int d = 0; d < 4; d++) {
        const float *v = rf_tensor_data(out[d]);
        for (int i = 0; i < 64 * 64; i++) assert_true(v[i] == 16.0f);
        rf_tensor_release(out[d]);
      }
      rf_session_free(s);
    }
    assert_int_equal(unsetenv(cases[k].name), 0);
  }
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blas_workspace_variable),
      cmocka_unit_test(test_gpu_knobs),
      cmocka_unit_test(test_mlp_gpu0),
      cmocka_unit_test(test_mlp_gpu0_3_allreduce),
      cmocka_unit_test(test_mlp_gpu0_3_full_size),
      cmocka_unit_test(test_mlp_gpu0_7_batch_1024),
      cmocka_unit_test(test_errors_in_capture_and_replay),
      cmocka_unit_test(test_shape_change_falls_back),
      cmocka_unit_test(test_cpu_device_falls_back),
      cmocka_unit_test(test_add_n_many_inputs),
      cmocka_unit_test(test_small_copies_replayed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
