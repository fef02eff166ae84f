/* tests/test_gpu_collective_errors.c - collectives of GPU participants that
 * go wrong at run time (tests/test_collective_errors.c's cases on GPU
 * devices): a participant that never arrives within the session's collective
 * timeout (the others fail naming the key and the missing device; no hang),
 * a late Broadcast sender and Reduce sender, a kernel failing on one GPU
 * before its collective, and concurrent steps of one session (no cross-talk
 * while other steps fail). The session keeps working after every error.
 *
 * gpu:i runs on physical GPU i % (number of GPUs): on one GPU these groups
 * run through the CUDA-kernel backend, on several through NCCL (the timeout
 * is the manager's either way: no NCCL launch happens with a peer missing).
 * Without a GPU every test skips ("GPU tests skipped: <reason>");
 * RF_GPU_TEST_ON_CPU=1 runs them on CPU devices (checks the tests). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringflow/collectives.h"
#include "runtime_test_ops.h"

#define NDEV 4

static int on_cpu(void) {
  const char *e = getenv("RF_GPU_TEST_ON_CPU");
  return e && e[0] == '1';
}

static const char *prefix(void) { return on_cpu() ? "cpu" : "gpu"; }

static void dev_name(int i, char *buf, size_t len) {
  snprintf(buf, len, "%s:%d", prefix(), i);
}

/* ---- test ops on GPU devices ---- */

/* The CPU test kernels forward or fail without touching data, so they serve
 * GPU devices as they are. */
static const rf__kernel_def test_kernels[] = {
    {.op = "TestFail", .device_type = RF_DEVICE_GPU, .compute = rt_fail},
    {.op = "TestIdentity",
     .device_type = RF_DEVICE_GPU,
     .compute = rt_identity},
};

static int setup(void **state) {
  static int done;
  rt_register();
  if (done) return 0;
  done = 1;
  for (size_t i = 0; i < sizeof test_kernels / sizeof *test_kernels; i++)
    assert_ok(rf__kernel_register(&test_kernels[i]));
  return 0;
}

/* ---- sessions ---- */

static rf_session_options options(int64_t timeout_ms) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = 4;
  o.collective_timeout_ms = timeout_ms;
  /* Uncaptured: the participants meet (or time out) in the executor. */
  o.gpu_graphs = 0;
  if (on_cpu()) {
    o.num_cpu_devices = NDEV;
  } else {
    o.num_cpu_devices = 1;
    o.num_gpu_devices = NDEV;
  }
  return o;
}

/* Skips unless a session can have GPU devices; prints the reason once. */
static void need_gpu(void) {
  if (!on_cpu()) rf_test_need_gpu();
}

static rf_session *session(const rf_graph *g, int64_t timeout_ms) {
  rf_session_options o = options(timeout_ms);
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static const rf_shape vec5 = {1, {5}};

/* Placeholders x0..x{n-1} (float64, vec5) on devices 0..n-1. */
static void placeholders(rf_graph *g, int n, rf_output *xs) {
  for (int i = 0; i < n; i++) {
    char dev[16], name[16];
    dev_name(i, dev, sizeof dev);
    snprintf(name, sizeof name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, name, RF_FLOAT64, vec5);
    rf_graph_pop_device(g);
  }
}

static rf_output nap_node(rf_graph *g, const char *name, int dev, rf_output x,
                          int64_t ms) {
  char d[16];
  dev_name(dev, d, sizeof d);
  return rt_nap_node(g, name, d, x, ms);
}

/* Fresh random inputs for n devices and their float64 sum. */
typedef struct inputs {
  rf_tensor *t[NDEV];
  rf_feed feeds[NDEV];
  double sum[5];
} inputs;

static void make_inputs(inputs *in, const rf_output *xs, int n, uint64_t *rng) {
  memset(in->sum, 0, sizeof in->sum);
  for (int i = 0; i < n; i++) {
    in->t[i] = rf_test_random_tensor(rng, RF_FLOAT64, vec5, -4, 4);
    in->feeds[i] = (rf_feed){xs[i], in->t[i]};
    for (int e = 0; e < 5; e++) in->sum[e] += rf_tensor_get(in->t[i], e);
  }
}

static void free_inputs(inputs *in, int n) {
  for (int i = 0; i < n; i++) rf_tensor_release(in->t[i]);
}

/* Runs an all-reduce group that works and checks its sums. */
static void check_good_group(rf_session *s, const rf_output *xs,
                             const rf_output *ys, int n, uint64_t *rng) {
  inputs in;
  make_inputs(&in, xs, n, rng);
  rf_tensor *out[NDEV];
  assert_ok(rf_session_run(s, in.feeds, n, ys, n, NULL, 0, out));
  for (int i = 0; i < n; i++) {
    assert_tensor_near(out[i], vec5, in.sum, 1e-12);
    rf_tensor_release(out[i]);
  }
  free_inputs(&in, n);
}

/* ---- a participant never arrives ---- */

/* Device 2's participant is held back (a slow kernel gates it) beyond the
 * session's 100 ms collective timeout: the others fail with
 * DEADLINE_EXCEEDED naming the key and device 2 within the timeout plus the
 * nap, and the same session runs a good group right after, twice. */
static void test_missing_participant_times_out(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed() + 2;
  rf_graph *g = rf_graph_new();
  rf_output xs[3], ys[3], good[3];
  placeholders(g, 3, xs);
  rf_all_reduce_n(g, "slowpoke", xs, 3, RF_REDUCE_SUM, ys);
  rf_output nap = nap_node(g, "nap", 2, xs[2], 600);
  assert_ok(rf_graph_add_control_edge(g, nap.node, ys[2].node));
  rf_all_reduce_n(g, "good", xs, 3, RF_REDUCE_SUM, good);
  assert_graph_ok(g);
  rf_session *s = session(g, 100);
  char waiting[64], arrived[96];
  snprintf(waiting, sizeof waiting, "waiting for %s:2 (1 of 3 participants)",
           prefix());
  snprintf(arrived, sizeof arrived,
           "arrived: %s:0 (slowpoke_0), %s:1 (slowpoke_1)", prefix(), prefix());
  for (int round = 0; round < 2; round++) {
    inputs in;
    make_inputs(&in, xs, 3, &rng);
    const char *want[] = {"collective 'slowpoke'", "timed out after 100 ms",
                          waiting, arrived};
    double dt = rf_test_expect_run_error(s, in.feeds, 3, ys, 2,
                                         RF_DEADLINE_EXCEEDED, want, 4);
    /* The step ends when the slow kernel does; nothing waits any longer. */
    assert_true(dt >= 100 && dt < 600 + 3000);
    free_inputs(&in, 3);
    check_good_group(s, xs, good, 3, &rng);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* A Broadcast whose sender is held back, then a Reduce whose sender is: the
 * others time out naming the late device. */
static void test_late_sender_times_out(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed() + 3;
  rf_graph *g = rf_graph_new();
  rf_output xs[3];
  placeholders(g, 3, xs);
  char d0[16], d1[16], d2[16];
  dev_name(0, d0, sizeof d0);
  dev_name(1, d1, sizeof d1);
  dev_name(2, d2, sizeof d2);
  rf_output b = rf_broadcast(g, "bc", nap_node(g, "nap0", 0, xs[0], 500));
  rf_output y1 = rt_unary_node(g, "TestIdentity", "y1", d1, b);
  rf_output y2 = rt_unary_node(g, "TestIdentity", "y2", d2, b);
  rf_output rin[3] = {xs[0], xs[1], nap_node(g, "nap2", 2, xs[2], 500)};
  assert_ok(rf_graph_push_device(g, d1));
  rf_output r = rf_reduce(g, "red", rin, 3, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  rf_output good[3];
  rf_all_reduce_n(g, "good", xs, 3, RF_REDUCE_SUM, good);
  assert_graph_ok(g);
  rf_session *s = session(g, 100);
  inputs in;
  make_inputs(&in, xs, 3, &rng);
  char w0[64], w2[64];
  snprintf(w0, sizeof w0, "waiting for %s (1 of 3", d0);
  snprintf(w2, sizeof w2, "waiting for %s (1 of 3", d2);
  rf_output f[2] = {y1, y2};
  const char *want1[] = {"collective 'bc'", w0, "timed out after 100 ms"};
  double dt = rf_test_expect_run_error(s, in.feeds, 3, f, 2,
                                       RF_DEADLINE_EXCEEDED, want1, 3);
  assert_true(dt >= 100 && dt < 500 + 3000);
  const char *want2[] = {"collective 'red'", w2};
  dt = rf_test_expect_run_error(s, in.feeds, 3, &r, 1, RF_DEADLINE_EXCEEDED,
                                want2, 2);
  assert_true(dt >= 100 && dt < 500 + 3000);
  free_inputs(&in, 3);
  check_good_group(s, xs, good, 3, &rng);
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- a kernel fails on one GPU before its collective ---- */

/* Device 1's input comes from a failing kernel: every device returns
 * promptly (cancellation, not the 60 s timeout) with the failing node's
 * error, and the session works afterwards. */
static void test_failing_kernel_before_all_reduce(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed() + 4;
  rf_graph *g = rf_graph_new();
  rf_output xs[3], bad_in[3], bad[3], good[3];
  placeholders(g, 3, xs);
  char d1[16], msg[32];
  dev_name(1, d1, sizeof d1);
  snprintf(msg, sizeof msg, "boom on %s", d1);
  bad_in[0] = xs[0];
  bad_in[1] = rt_fail_node(g, "culprit", d1, xs[1], msg);
  bad_in[2] = xs[2];
  rf_all_reduce_n(g, "bad", bad_in, 3, RF_REDUCE_SUM, bad);
  rf_all_reduce_n(g, "good", xs, 3, RF_REDUCE_SUM, good);
  assert_graph_ok(g);
  rf_session *s = session(g, 60000);
  for (int round = 0; round < 2; round++) {
    inputs in;
    make_inputs(&in, xs, 3, &rng);
    const char *want[] = {"culprit", msg};
    assert_true(rf_test_expect_run_error(s, in.feeds, 3, bad, 3, RF_INTERNAL,
                                         want, 2) < 5000);
    free_inputs(&in, 3);
    check_good_group(s, xs, good, 3, &rng);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- concurrent steps ---- */

typedef struct worker {
  rf_session *s;
  const rf_output *xs, *ys, *bad;
  int steps;
  uint64_t rng;
  int failures; /* cmocka cannot assert off the main thread */
} worker;

/* Each step feeds its own values; an all-reduce and a reduce+broadcast of
 * the same inputs must both give this step's sums. */
static void *good_worker(void *arg) {
  worker *w = arg;
  for (int k = 0; k < w->steps; k++) {
    inputs in;
    memset(in.sum, 0, sizeof in.sum);
    int made = 0;
    for (int i = 0; i < NDEV; i++) {
      rf_shape s = vec5;
      if (rf_tensor_new(RF_FLOAT64, &s, NULL, &in.t[i])) break;
      made++;
      for (int e = 0; e < 5; e++) {
        double v = rf_test_uniform(&w->rng, -8, 8);
        rf_tensor_set(in.t[i], e, v);
        in.sum[e] += v;
      }
      in.feeds[i] = (rf_feed){w->xs[i], in.t[i]};
    }
    rf_tensor *out[2 * NDEV] = {NULL};
    rf_status *st = made < NDEV ? rf__oom()
                                : rf_session_run(w->s, in.feeds, NDEV, w->ys,
                                                 2 * NDEV, NULL, 0, out);
    if (st) {
      fprintf(stderr, "worker step %d: %s\n", k, rf_status_message(st));
      rf_status_free(st);
      w->failures++;
    }
    for (int i = 0; !st && i < 2 * NDEV; i++)
      for (int e = 0; e < 5; e++) {
        double got = rf_tensor_get(out[i], e), want = in.sum[e];
        if (got - want > 1e-9 || want - got > 1e-9) {
          if (!w->failures)
            fprintf(stderr, "worker step %d output %d[%d]: %g, want %g\n", k, i,
                    e, got, want);
          w->failures++;
        }
      }
    for (int i = 0; i < 2 * NDEV; i++) rf_tensor_release(out[i]);
    free_inputs(&in, made);
  }
  return NULL;
}

/* Steps that always fail (a kernel fails before the collective). */
static void *bad_worker(void *arg) {
  worker *w = arg;
  for (int k = 0; k < w->steps; k++) {
    rf_tensor *t[NDEV];
    rf_feed feeds[NDEV];
    int made = 0;
    for (int i = 0; i < NDEV; i++) {
      rf_shape s = vec5;
      if (rf_tensor_new(RF_FLOAT64, &s, NULL, &t[i])) break;
      made++;
      for (int e = 0; e < 5; e++) rf_tensor_set(t[i], e, i);
      feeds[i] = (rf_feed){w->xs[i], t[i]};
    }
    rf_tensor *out[NDEV] = {NULL};
    rf_status *st = made < NDEV ? NULL
                                : rf_session_run(w->s, feeds, NDEV, w->bad,
                                                 NDEV, NULL, 0, out);
    if (!st || rf_status_code(st) != RF_INTERNAL ||
        !strstr(rf_status_message(st), "saboteur"))
      w->failures++;
    rf_status_free(st);
    for (int i = 0; i < made; i++) rf_tensor_release(t[i]);
  }
  return NULL;
}

static void test_concurrent_steps_without_cross_talk(void **state) {
  need_gpu();
  rf_graph *g = rf_graph_new();
  rf_output xs[NDEV], ys[2 * NDEV], bad_in[NDEV], bad[NDEV];
  placeholders(g, NDEV, xs);
  rf_all_reduce_n(g, "sum", xs, NDEV, RF_REDUCE_SUM, ys);
  char dev[16];
  dev_name(2, dev, sizeof dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output r = rf_reduce(g, "red", xs, NDEV, RF_REDUCE_SUM);
  rf_output b = rf_broadcast(g, "bc", r);
  rf_graph_pop_device(g);
  for (int i = 0; i < NDEV; i++) {
    dev_name(i, dev, sizeof dev);
    ys[NDEV + i] = rt_unary_node(g, "TestIdentity", NULL, dev, b);
    bad_in[i] =
        i == 3 ? rt_fail_node(g, "saboteur", dev, xs[3], "sabotage") : xs[i];
  }
  rf_all_reduce_n(g, "doomed", bad_in, NDEV, RF_REDUCE_SUM, bad);
  assert_graph_ok(g);
  rf_session *s = session(g, 60000);
  uint64_t seed = rf_test_seed() + 5;
  worker w[3];
  for (int i = 0; i < 3; i++)
    w[i] = (worker){.s = s,
                    .xs = xs,
                    .ys = ys,
                    .bad = bad,
                    .steps = 30,
                    .rng = seed + (uint64_t)i * 7919};
  pthread_t th[3];
  double t0 = rf_test_now_ms();
  assert_int_equal(pthread_create(&th[0], NULL, good_worker, &w[0]), 0);
  assert_int_equal(pthread_create(&th[1], NULL, good_worker, &w[1]), 0);
  assert_int_equal(pthread_create(&th[2], NULL, bad_worker, &w[2]), 0);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  assert_true(rf_test_now_ms() - t0 < 60000);
  for (int i = 0; i < 3; i++) assert_int_equal(w[i].failures, 0);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_missing_participant_times_out, setup),
      cmocka_unit_test_setup(test_late_sender_times_out, setup),
      cmocka_unit_test_setup(test_failing_kernel_before_all_reduce, setup),
      cmocka_unit_test_setup(test_concurrent_steps_without_cross_talk, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
