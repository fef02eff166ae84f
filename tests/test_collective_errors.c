/* tests/test_collective_errors.c - collectives that go wrong at run time,
 * through sessions: a kernel failing on one device before its collective
 * (every device returns promptly, the error names the failing node), a
 * participant that never arrives within the collective timeout (the error
 * names the key and the missing device; no hang), participants whose shapes
 * differ, and concurrent steps of one session (no cross-talk, even while
 * other steps fail). The session keeps working after every error. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringflow/collectives.h"
#include "runtime_test_ops.h"

static rf_session *session(const rf_graph *g, int ndev, int64_t timeout_ms) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ndev;
  o.num_threads = 4;
  o.collective_timeout_ms = timeout_ms;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static const rf_shape vec5 = {1, {5}};

/* Placeholders x0..x{n-1} of `shape` on cpu:0..n-1. */
static void placeholders(rf_graph *g, int n, rf_shape shape, rf_output *xs) {
  for (int i = 0; i < n; i++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, name, RF_FLOAT64, shape);
    rf_graph_pop_device(g);
  }
}

/* Fresh random inputs for n devices and the float64 sum. */
typedef struct inputs {
  rf_tensor *t[8];
  rf_feed feeds[8];
  double sum[64];
} inputs;

static void make_inputs(inputs *in, const rf_output *xs, int n, rf_shape s,
                        uint64_t *rng) {
  int64_t len = rf_shape_num_elements(&s);
  memset(in->sum, 0, sizeof in->sum);
  for (int i = 0; i < n; i++) {
    in->t[i] = rf_test_random_tensor(rng, RF_FLOAT64, s, -4, 4);
    in->feeds[i] = (rf_feed){xs[i], in->t[i]};
    for (int64_t e = 0; e < len; e++) in->sum[e] += rf_tensor_get(in->t[i], e);
  }
}

static void free_inputs(inputs *in, int n) {
  for (int i = 0; i < n; i++) rf_tensor_release(in->t[i]);
}

/* Runs fetches of an all-reduce group that works and checks the sums. */
static void check_good_group(rf_session *s, const rf_output *xs,
                             const rf_output *ys, int n, uint64_t *rng) {
  inputs in;
  make_inputs(&in, xs, n, vec5, rng);
  rf_tensor *out[8];
  assert_ok(rf_session_run(s, in.feeds, n, ys, n, NULL, 0, out));
  for (int i = 0; i < n; i++) {
    assert_tensor_near(out[i], vec5, in.sum, 1e-12);
    rf_tensor_release(out[i]);
  }
  free_inputs(&in, n);
}

/* ---- a kernel fails on one device before its collective ---- */

static void test_failing_kernel_before_all_reduce(void **state) {
  rt_register();
  uint64_t rng = rf_test_seed();
  rf_graph *g = rf_graph_new();
  rf_output xs[3], bad_in[3], bad[3], gated[3], good[3];
  placeholders(g, 3, vec5, xs);
  /* Data path: cpu:1's input comes from a failing kernel. */
  bad_in[0] = xs[0];
  bad_in[1] = rt_fail_node(g, "culprit", "cpu:1", xs[1], "boom on cpu:1");
  bad_in[2] = xs[2];
  rf_all_reduce_n(g, "bad", bad_in, 3, RF_REDUCE_SUM, bad);
  /* Control path: cpu:2's participant waits for a failing kernel. */
  rf_all_reduce_n(g, "gated", xs, 3, RF_REDUCE_SUM, gated);
  rf_output fail2 = rt_fail_node(g, "gatekeeper", "cpu:2", xs[2], "no entry");
  assert_ok(rf_graph_add_control_edge(g, fail2.node, gated[2].node));
  rf_all_reduce_n(g, "good", xs, 3, RF_REDUCE_SUM, good);
  assert_graph_ok(g);
  /* A timeout far beyond the test's patience: only cancellation can make
   * the waiting participants return promptly. */
  rf_session *s = session(g, 3, 60000);
  for (int round = 0; round < 3; round++) {
    inputs in;
    make_inputs(&in, xs, 3, vec5, &rng);
    const char *want1[] = {"culprit", "boom on cpu:1", "cpu:1"};
    double dt =
        rf_test_expect_run_error(s, in.feeds, 3, bad, 3, RF_INTERNAL, want1, 3);
    assert_true(dt < 5000);
    /* Fetching only cpu:0's output still runs (and fails) every peer. */
    const char *want2[] = {"gatekeeper", "no entry"};
    dt = rf_test_expect_run_error(s, in.feeds, 3, &gated[0], 1, RF_INTERNAL,
                                  want2, 2);
    assert_true(dt < 5000);
    free_inputs(&in, 3);
    check_good_group(s, xs, good, 3, &rng); /* the session still works */
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* Reduce and Broadcast lowered participants are released the same way. */
static void test_failing_kernel_before_reduce_and_broadcast(void **state) {
  rt_register();
  uint64_t rng = rf_test_seed() + 1;
  rf_graph *g = rf_graph_new();
  rf_output xs[3], rin[3];
  placeholders(g, 3, vec5, xs);
  rin[0] = xs[0];
  rin[1] = xs[1];
  rin[2] = rt_fail_node(g, "sender_fails", "cpu:2", xs[2], "reduce input");
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output r = rf_reduce(g, "red", rin, 3, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  /* Broadcast from cpu:1 of a failing value to cpu:0 and cpu:2. */
  rf_output src = rt_fail_node(g, "root_fails", "cpu:1", xs[1], "bcast input");
  rf_output b = rf_broadcast(g, "bc", src);
  rf_output b0 = rt_unary_node(g, "TestIdentity", "b0", "cpu:0", b);
  rf_output b2 = rt_unary_node(g, "TestIdentity", "b2", "cpu:2", b);
  rf_output good[3];
  rf_all_reduce_n(g, "good", xs, 3, RF_REDUCE_SUM, good);
  assert_graph_ok(g);
  rf_session *s = session(g, 3, 60000);
  for (int round = 0; round < 2; round++) {
    inputs in;
    make_inputs(&in, xs, 3, vec5, &rng);
    const char *w1[] = {"sender_fails", "reduce input"};
    assert_true(rf_test_expect_run_error(s, in.feeds, 3, &r, 1, RF_INTERNAL, w1,
                                         2) < 5000);
    const char *w2[] = {"root_fails", "bcast input"};
    rf_output f[2] = {b0, b2};
    assert_true(rf_test_expect_run_error(s, in.feeds, 3, f, 2, RF_INTERNAL, w2,
                                         2) < 5000);
    free_inputs(&in, 3);
    check_good_group(s, xs, good, 3, &rng);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- a participant never arrives ---- */

/* cpu:2's participant is held back (a slow kernel gates it) beyond the
 * session's 100 ms collective timeout: the others fail with
 * DEADLINE_EXCEEDED naming the key and cpu:2, and the late participant finds
 * the failed group instead of completing it. */
static void test_missing_participant_times_out(void **state) {
  rt_register();
  uint64_t rng = rf_test_seed() + 2;
  rf_graph *g = rf_graph_new();
  rf_output xs[3], ys[3], good[3];
  placeholders(g, 3, vec5, xs);
  rf_all_reduce_n(g, "slowpoke", xs, 3, RF_REDUCE_SUM, ys);
  rf_output nap = rt_nap_node(g, "nap", "cpu:2", xs[2], 600);
  assert_ok(rf_graph_add_control_edge(g, nap.node, ys[2].node));
  rf_all_reduce_n(g, "good", xs, 3, RF_REDUCE_SUM, good);
  assert_graph_ok(g);
  rf_session *s = session(g, 3, 100);
  for (int round = 0; round < 2; round++) {
    inputs in;
    make_inputs(&in, xs, 3, vec5, &rng);
    const char *want[] = {"collective 'slowpoke'", "timed out after 100 ms",
                          "waiting for cpu:2 (1 of 3 participants)",
                          "arrived: cpu:0 (slowpoke_0), cpu:1 (slowpoke_1)"};
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

/* A Broadcast whose sender is held back (its input comes from a slow
 * kernel): the receivers time out naming the sender's device; the same for a
 * Reduce whose sender is late. */
static void test_late_sender_times_out(void **state) {
  rt_register();
  uint64_t rng = rf_test_seed() + 3;
  rf_graph *g = rf_graph_new();
  rf_output xs[3];
  placeholders(g, 3, vec5, xs);
  rf_output slow0 = rt_nap_node(g, "nap0", "cpu:0", xs[0], 500);
  rf_output b = rf_broadcast(g, "bc", slow0);
  rf_output y1 = rt_unary_node(g, "TestIdentity", "y1", "cpu:1", b);
  rf_output y2 = rt_unary_node(g, "TestIdentity", "y2", "cpu:2", b);
  rf_output rin[3] = {xs[0], xs[1],
                      rt_nap_node(g, "nap2", "cpu:2", xs[2], 500)};
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output r = rf_reduce(g, "red", rin, 3, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  rf_output good[3];
  rf_all_reduce_n(g, "good", xs, 3, RF_REDUCE_SUM, good);
  assert_graph_ok(g);
  rf_session *s = session(g, 3, 100);
  inputs in;
  make_inputs(&in, xs, 3, vec5, &rng);
  rf_output f[2] = {y1, y2};
  const char *w1[] = {"collective 'bc'", "waiting for cpu:0 (1 of 3",
                      "timed out after 100 ms"};
  double dt = rf_test_expect_run_error(s, in.feeds, 3, f, 2,
                                       RF_DEADLINE_EXCEEDED, w1, 3);
  assert_true(dt >= 100 && dt < 500 + 3000);
  const char *w2[] = {"collective 'red'", "waiting for cpu:2 (1 of 3"};
  dt = rf_test_expect_run_error(s, in.feeds, 3, &r, 1, RF_DEADLINE_EXCEEDED, w2,
                                2);
  assert_true(dt >= 100 && dt < 500 + 3000);
  free_inputs(&in, 3);
  check_good_group(s, xs, good, 3, &rng);
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- participants disagree ---- */

static void test_mismatched_shapes_fail_at_run_time(void **state) {
  rt_register();
  uint64_t rng = rf_test_seed() + 4;
  /* Unknown shapes: only the run can tell. */
  rf_graph *g = rf_graph_new();
  rf_output xs[2], ys[2];
  placeholders(g, 2, rf_shape_of(1, (int64_t)-1), xs);
  rf_all_reduce_n(g, "shapes", xs, 2, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  rf_session *s = session(g, 2, 60000);
  rf_tensor *a = rf_test_random_tensor(&rng, RF_FLOAT64,
                                       rf_shape_of(1, (int64_t)3), -1, 1);
  rf_tensor *b = rf_test_random_tensor(&rng, RF_FLOAT64,
                                       rf_shape_of(1, (int64_t)4), -1, 1);
  rf_feed feeds[2] = {{xs[0], a}, {xs[1], b}};
  const char *want[] = {"collective 'shapes'",
                        "disagree on shape",
                        "(3)",
                        "(4)",
                        "cpu:0",
                        "cpu:1"};
  for (int round = 0; round < 2; round++)
    assert_true(rf_test_expect_run_error(s, feeds, 2, ys, 2,
                                         RF_INVALID_ARGUMENT, want, 6) < 5000);
  /* Same session, agreeing shapes: works. */
  rf_tensor *c = rf_test_random_tensor(&rng, RF_FLOAT64,
                                       rf_shape_of(1, (int64_t)3), -1, 1);
  feeds[1].value = c;
  rf_tensor *out[2];
  assert_ok(rf_session_run(s, feeds, 2, ys, 2, NULL, 0, out));
  double sum[3];
  for (int e = 0; e < 3; e++)
    sum[e] = rf_tensor_get(a, e) + rf_tensor_get(c, e);
  for (int i = 0; i < 2; i++) {
    assert_tensor_near(out[i], rf_shape_of(1, (int64_t)3), sum, 1e-12);
    rf_tensor_release(out[i]);
  }
  rf_tensor_release(a);
  rf_tensor_release(b);
  rf_tensor_release(c);
  rf_session_free(s);
  rf_graph_free(g);

  /* Known, different shapes: refused as the graph is built, naming both
   * inputs, their shapes and devices; nothing is added. */
  g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output p = rf_placeholder(g, "p", RF_FLOAT32,
                               rf_shape_of(2, (int64_t)2, (int64_t)3));
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output q = rf_placeholder(g, "q", RF_FLOAT32,
                               rf_shape_of(2, (int64_t)3, (int64_t)2));
  rf_graph_pop_device(g);
  rf_output pq[2] = {p, q};
  int before = rf_graph_num_nodes(g);
  rf_all_reduce_n(g, "static", pq, 2, RF_REDUCE_MAX, ys);
  const char *want2[] = {"AllReduce 'static': inputs disagree on shape",
                         "(2, 3)",
                         "(3, 2)",
                         "'p'",
                         "'q'",
                         "cpu:0",
                         "cpu:1"};
  rf_status *st = rf_graph_status(g);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  for (int k = 0; k < 7; k++)
    assert_non_null(strstr(rf_status_message(st), want2[k]));
  rf_status_free(st);
  assert_int_equal(rf_graph_num_nodes(g), before);
  rf_graph_free(g);
  /* Partly known shapes that may agree build (the run checks them); a
   * rank that differs is refused, for every collective of n inputs. */
  for (int op = 0; op < 4; op++) {
    g = rf_graph_new();
    assert_ok(rf_graph_push_device(g, "cpu:0"));
    p = rf_placeholder(g, "p", RF_FLOAT32, rf_shape_of(2, (int64_t)-1, 4));
    rf_graph_pop_device(g);
    assert_ok(rf_graph_push_device(g, "cpu:1"));
    q = rf_placeholder(g, "q", RF_FLOAT32, rf_shape_of(2, (int64_t)6, -1));
    rf_output r = rf_placeholder(g, "r", RF_FLOAT32, rf_shape_of(1, 24));
    rf_graph_pop_device(g);
    rf_output ok[2] = {p, q}, bad[2] = {p, r};
    for (int round = 0; round < 2; round++) {
      rf_output *in = round ? bad : ok;
      if (op == 0)
        rf_all_reduce_n(g, NULL, in, 2, RF_REDUCE_SUM, ys);
      else if (op == 1)
        rf_all_gather_n(g, NULL, in, 2, ys);
      else if (op == 2)
        rf_reduce_scatter_n(g, NULL, in, 2, RF_REDUCE_SUM, ys);
      else
        rf_reduce(g, NULL, in, 2, RF_REDUCE_SUM);
      if (round == 0) assert_graph_ok(g);
    }
    st = rf_graph_status(g);
    assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
    assert_non_null(strstr(rf_status_message(st), "disagree on shape"));
    assert_non_null(strstr(rf_status_message(st), "(?, 4)"));
    assert_non_null(strstr(rf_status_message(st), "(24)"));
    rf_status_free(st);
    rf_graph_free(g);
  }
}

/* ---- concurrent steps ---- */

typedef struct worker {
  rf_session *s;
  const rf_output *xs, *ys, *bad;
  int n, steps;
  uint64_t rng;
  int failures; /* cmocka cannot assert off the main thread */
} worker;

/* Each step feeds its own values and checks its own sums; an all-reduce and
 * a reduce+broadcast of the same inputs must both match. */
/* Scalars fed where the graph could not tell (unknown rank): all-gather
 * and reduce-scatter need rank >= 1 and say so, not "a first dimension
 * divisible by 2 devices, got ()". */
static void test_scalars_to_gather_and_scatter(void **state) {
  (void)state;
  rt_register();
  uint64_t rng = rf_test_seed() + 5;
  rf_graph *g = rf_graph_new();
  rf_output xs[2], gs[2], rs[2];
  placeholders(g, 2, rf_shape_unknown(), xs);
  rf_all_gather_n(g, "gs", xs, 2, gs);
  rf_reduce_scatter_n(g, "rs", xs, 2, RF_REDUCE_SUM, rs);
  assert_graph_ok(g);
  rf_session *s = session(g, 2, 60000);
  rf_tensor *a = rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(0), -1, 1);
  rf_tensor *b = rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(0), -1, 1);
  rf_feed feeds[2] = {{xs[0], a}, {xs[1], b}};
  const char *want_rs[] = {"(ReduceScatter)", "collective 'rs'",
                           "reduce_scatter needs inputs of rank >= 1, got a "
                           "scalar"};
  rf_test_expect_run_error(s, feeds, 2, rs, 2, RF_INVALID_ARGUMENT, want_rs, 3);
  const char *want_gs[] = {"(AllGather)", "collective 'gs'",
                           "all_gather needs inputs of rank >= 1, got a "
                           "scalar"};
  rf_test_expect_run_error(s, feeds, 2, gs, 2, RF_INVALID_ARGUMENT, want_gs, 3);
  rf_tensor_release(a);
  rf_tensor_release(b);
  rf_session_free(s);
  rf_graph_free(g);
}

static void *good_worker(void *arg) {
  worker *w = arg;
  for (int k = 0; k < w->steps; k++) {
    inputs in;
    int64_t len = 5;
    memset(in.sum, 0, sizeof in.sum);
    for (int i = 0; i < w->n; i++) {
      rf_shape s = vec5;
      rf_tensor *t = NULL;
      if (rf_tensor_new(RF_FLOAT64, &s, NULL, &t)) {
        w->failures++;
        return NULL;
      }
      for (int64_t e = 0; e < len; e++)
        rf_tensor_set(t, e, rf_test_uniform(&w->rng, -8, 8));
      in.t[i] = t;
      in.feeds[i] = (rf_feed){w->xs[i], t};
      for (int64_t e = 0; e < len; e++) in.sum[e] += rf_tensor_get(t, e);
    }
    rf_tensor *out[16] = {NULL};
    rf_status *st =
        rf_session_run(w->s, in.feeds, w->n, w->ys, 2 * w->n, NULL, 0, out);
    if (st) {
      fprintf(stderr, "worker step %d: %s\n", k, rf_status_message(st));
      rf_status_free(st);
      w->failures++;
    }
    for (int i = 0; !st && i < 2 * w->n; i++)
      for (int64_t e = 0; e < len; e++) {
        double got = rf_tensor_get(out[i], e), want = in.sum[e];
        if (got - want > 1e-9 || want - got > 1e-9) {
          if (!w->failures)
            fprintf(stderr, "worker step %d output %d[%lld]: %g, want %g\n", k,
                    i, (long long)e, got, want);
          w->failures++;
        }
      }
    for (int i = 0; i < 2 * w->n; i++) rf_tensor_release(out[i]);
    free_inputs(&in, w->n);
  }
  return NULL;
}

/* Steps that always fail (a kernel fails before the collective). */
static void *bad_worker(void *arg) {
  worker *w = arg;
  for (int k = 0; k < w->steps; k++) {
    rf_tensor *t[8];
    rf_feed feeds[8];
    for (int i = 0; i < w->n; i++) {
      rf_shape s = vec5;
      if (rf_tensor_new(RF_FLOAT64, &s, NULL, &t[i])) return NULL;
      for (int e = 0; e < 5; e++) rf_tensor_set(t[i], e, i);
      feeds[i] = (rf_feed){w->xs[i], t[i]};
    }
    rf_tensor *out[8] = {NULL};
    rf_status *st =
        rf_session_run(w->s, feeds, w->n, w->bad, w->n, NULL, 0, out);
    if (!st || rf_status_code(st) != RF_INTERNAL ||
        !strstr(rf_status_message(st), "saboteur"))
      w->failures++;
    rf_status_free(st);
    for (int i = 0; i < w->n; i++) rf_tensor_release(t[i]);
  }
  return NULL;
}

static void test_concurrent_steps_without_cross_talk(void **state) {
  rt_register();
  enum { N = 4 };
  rf_graph *g = rf_graph_new();
  rf_output xs[N], ys[2 * N], bad_in[N], bad[N];
  placeholders(g, N, vec5, xs);
  rf_all_reduce_n(g, "sum", xs, N, RF_REDUCE_SUM, ys);
  assert_ok(rf_graph_push_device(g, "cpu:2"));
  rf_output r = rf_reduce(g, "red", xs, N, RF_REDUCE_SUM);
  rf_output b = rf_broadcast(g, "bc", r);
  rf_graph_pop_device(g);
  for (int i = 0; i < N; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    ys[N + i] = rt_unary_node(g, "TestIdentity", NULL, dev, b);
    bad_in[i] = i == 3 ? rt_fail_node(g, "saboteur", "cpu:3", xs[3], "sabotage")
                       : xs[i];
  }
  rf_all_reduce_n(g, "doomed", bad_in, N, RF_REDUCE_SUM, bad);
  assert_graph_ok(g);
  rf_session *s = session(g, N, 60000);
  uint64_t seed = rf_test_seed() + 5;
  worker w[3];
  for (int i = 0; i < 3; i++)
    w[i] = (worker){.s = s,
                    .xs = xs,
                    .ys = ys,
                    .bad = bad,
                    .n = N,
                    .steps = 40,
                    .rng = seed + (uint64_t)i * 7919};
  pthread_t th[3];
  double t0 = rf_test_now_ms();
  assert_int_equal(pthread_create(&th[0], NULL, good_worker, &w[0]), 0);
  assert_int_equal(pthread_create(&th[1], NULL, good_worker, &w[1]), 0);
  assert_int_equal(pthread_create(&th[2], NULL, bad_worker, &w[2]), 0);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  assert_true(rf_test_now_ms() - t0 < 30000);
  for (int i = 0; i < 3; i++) assert_int_equal(w[i].failures, 0);
  rf_session_free(s);
  rf_graph_free(g);
}

/* 8 devices on one worker thread: collective kernels never block it. */
static void test_eight_devices_one_thread(void **state) {
  rt_register();
  uint64_t rng = rf_test_seed() + 6;
  rf_graph *g = rf_graph_new();
  rf_output xs[8], ys[8];
  placeholders(g, 8, vec5, xs);
  rf_all_reduce_n(g, "wide", xs, 8, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 8;
  o.num_threads = 1;
  o.collective_timeout_ms = 60000;
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  for (int k = 0; k < 3; k++) check_good_group(s, xs, ys, 8, &rng);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failing_kernel_before_all_reduce),
      cmocka_unit_test(test_failing_kernel_before_reduce_and_broadcast),
      cmocka_unit_test(test_missing_participant_times_out),
      cmocka_unit_test(test_late_sender_times_out),
      cmocka_unit_test(test_mismatched_shapes_fail_at_run_time),
      cmocka_unit_test(test_scalars_to_gather_and_scatter),
      cmocka_unit_test(test_concurrent_steps_without_cross_talk),
      cmocka_unit_test(test_eight_devices_one_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
