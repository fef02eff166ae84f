/* tests/test_gpu_graph_stress.c - steps replayed as CUDA graphs
 * (rf_session_options.gpu_graphs) under a mixed load, checked bit for bit
 * against the same session with gpu_graphs off. A one-layer tanh model on
 * gpu:0 trained by gradient descent: many steps, each a run of 1-4 repeats of
 * one of 24 (fetch set, train or not) requests at one of three batch sizes,
 * every feed (the batch, the learning rate) fresh each step. That makes
 * feeds whose values change but not their shape (replays), shape changes
 * (fallbacks, then captures), more plans than the session keeps graphs for
 * (RF__GRAPH_MAX_KEPT, runtime/step_graph.h: the log says so), and a
 * request with the wrong feed shape (INVALID_ARGUMENT on both). After a few
 * steps a replayed training step runs with its k-th allocation failing, k = 1,
 * 2,
 * ... until it succeeds: each failure is RESOURCE_EXHAUSTED, and then both
 * sessions start again from the initial variables and must agree to the
 * end. Last, two threads run a fresh graphed session and the plain one at
 * once (no updates; the shape changes every two runs, so captures overlap
 * the other thread's runs of both) and each gets the plain session's bits
 * for its own data.
 * Skips without a GPU ("GPU tests skipped: <reason>"). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ringflow/debug.h"
#include "ringflow/log.h"
#include "testutil.h"

enum { IN = 24, HID = 16, NOUT = 6, NCONF = 24, STEPS = 400, THREAD_RUNS = 40 };

static const int64_t batches[3] = {8, 16, 40};

/* ---- the log ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int captures, full;

static void on_log(rf_log_level level, const char *msg, void *user) {
  (void)level, (void)user;
  pthread_mutex_lock(&log_mu);
  captures += strstr(msg, "gpu graphs: captured the step") != NULL;
  full += strstr(msg, "step graphs (the most it keeps)") != NULL;
  pthread_mutex_unlock(&log_mu);
}

/* ---- the model ---- */

typedef struct model {
  rf_graph *g;
  rf_output x, lr;
  rf_output out[NOUT]; /* loss, y, dW, db, W, b */
  rf_node *train[2], *init[2];
} model;

static void build(model *m, uint64_t *rng) {
  memset(m, 0, sizeof *m);
  rf_graph *g = m->g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "gpu:0"));
  m->x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, -1, IN));
  m->lr = rf_placeholder(g, "lr", RF_FLOAT32, rf_shape_scalar());
  rf_output w = rf_variable(g, "W", RF_FLOAT32, rf_shape_of(2, IN, HID));
  rf_output b = rf_variable(g, "b", RF_FLOAT32, rf_shape_of(1, HID));
  rf_tensor *w0 =
      rf_test_random_tensor(rng, RF_FLOAT32, rf_shape_of(2, IN, HID), -1, 1);
  rf_tensor *b0 =
      rf_test_random_tensor(rng, RF_FLOAT32, rf_shape_of(1, HID), -1, 1);
  m->init[0] = rf_assign(g, "init_W", w, rf_const(g, "W0", w0));
  m->init[1] = rf_assign(g, "init_b", b, rf_const(g, "b0", b0));
  rf_tensor_release(w0);
  rf_tensor_release(b0);
  rf_output rw = rf_read_variable(g, "rW", w);
  rf_output rb = rf_read_variable(g, "rb", b);
  rf_output y = rf_tanh(
      g, "y", rf_bias_add(g, NULL, rf_matmul(g, NULL, m->x, rw, 0, 0), rb));
  rf_output loss = rf_sum(g, "loss", rf_mul(g, NULL, y, y), NULL, -1, false);
  rf_output wrt[2] = {rw, rb}, grads[2];
  assert_ok(rf_gradients(g, &loss, 1, wrt, 2, NULL, grads));
  m->train[0] = rf_apply_gradient_descent(g, "sgd_W", w, m->lr, grads[0]);
  m->train[1] = rf_apply_gradient_descent(g, "sgd_b", b, m->lr, grads[1]);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_output out[NOUT] = {loss, y, grads[0], grads[1], rw, rb};
  memcpy(m->out, out, sizeof out);
}

/* A request: fetches out[i] for the bits of mask, with the update or not. */
typedef struct conf {
  unsigned mask;
  bool train;
} conf;

static int fetches_of(const model *m, conf c, rf_output *f) {
  int n = 0;
  for (int i = 0; i < NOUT; i++)
    if (c.mask >> i & 1) f[n++] = m->out[i];
  return n;
}

static rf_session *open_session(const model *m, int graphs) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 1;
  o.gpu_graphs = graphs;
  rf_session *s = NULL;
  assert_ok(rf_session_new(m->g, &o, &s));
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, m->init, 2, NULL));
  return s;
}

static void expect_same_bits(rf_tensor *a, rf_tensor *b, int step, int i) {
  rf_shape sa = rf_tensor_shape(a), sb = rf_tensor_shape(b);
  assert_true(rf_shape_equal(&sa, &sb));
  assert_int_equal(rf_tensor_nbytes(a), rf_tensor_nbytes(b));
  if (memcmp(rf_tensor_data(a), rf_tensor_data(b), rf_tensor_nbytes(a)))
    fail_msg("step %d: fetch %d differs with gpu_graphs on", step, i);
}

/* Runs c on both sessions with the same fresh feeds; compares the results.
 * inject: the graphed run fails at its k-th allocation, k = 1, 2, ...,
 * until it succeeds (the plain run then runs once). */
static void step_both(const model *m, rf_session *plain, rf_session *graphed,
                      conf c, int64_t rows, uint64_t *rng, int step,
                      bool inject) {
  rf_tensor *x =
      rf_test_random_tensor(rng, RF_FLOAT32, rf_shape_of(2, rows, IN), -1, 1);
  rf_tensor *lr = NULL;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT32, 0.01 + 0.001 * (step % 7), &lr));
  rf_feed feeds[2] = {{m->x, x}, {m->lr, lr}};
  rf_output f[NOUT];
  int nf = fetches_of(m, c, f);
  rf_tensor *a[NOUT] = {0}, *b[NOUT] = {0};
  int failures = 0;
  for (int64_t k = 1;; k++) {
    if (inject) rf_debug_fail_allocation_once(k);
    rf_status *st =
        rf_session_run(graphed, feeds, 2, f, nf, m->train, c.train ? 2 : 0, b);
    if (inject) rf_debug_fail_allocation_once(0);
    if (!st) break;
    if (!inject) fail_msg("step %d: %s", step, rf_status_message(st));
    assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
    rf_status_free(st);
    failures++;
  }
  if (inject) {
    assert_true(failures > 0);
    printf("  step %d: %d injected failures, then success\n", step, failures);
  }
  assert_ok(
      rf_session_run(plain, feeds, 2, f, nf, m->train, c.train ? 2 : 0, a));
  for (int i = 0; i < nf; i++) {
    if (!inject) expect_same_bits(a[i], b[i], step, i);
    rf_tensor_release(a[i]);
    rf_tensor_release(b[i]);
  }
  rf_tensor_release(x);
  rf_tensor_release(lr);
}

/* ---- two threads on the graphed session ---- */

typedef struct worker {
  const model *m;
  rf_session *plain, *graphed;
  uint64_t seed;
  int bad; /* runs whose bits differed */
  rf_status *err;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  uint64_t rng = w->seed;
  rf_output f = w->m->out[1]; /* y: reads the variables, no update */
  for (int r = 0; r < THREAD_RUNS && !w->err; r++) {
    /* two runs a shape: each shape change is captured anew */
    int64_t rows = batches[(r / 2) % 2];
    rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32,
                                         rf_shape_of(2, rows, IN), -1, 1);
    rf_feed feed = {w->m->x, x};
    rf_tensor *a = NULL, *b = NULL;
    w->err = rf_session_run(w->graphed, &feed, 1, &f, 1, NULL, 0, &b);
    if (!w->err)
      w->err = rf_session_run(w->plain, &feed, 1, &f, 1, NULL, 0, &a);
    if (!w->err)
      w->bad += memcmp(rf_tensor_data(a), rf_tensor_data(b),
                       rf_tensor_nbytes(a)) != 0;
    rf_tensor_release(a);
    rf_tensor_release(b);
    rf_tensor_release(x);
  }
  return NULL;
}

static void test_mixed_steps_same_bits(void **state) {
  (void)state;
  rf_test_need_gpu();
  uint64_t rng = rf_test_seed();
  model m;
  build(&m, &rng);
  conf confs[NCONF];
  for (int i = 0; i < NCONF; i++) /* distinct: mask i+1 (of 63), train odd */
    confs[i] = (conf){(unsigned)(1 + (i * 37) % 63), i % 2 == 1};
  pthread_mutex_lock(&log_mu);
  captures = full = 0;
  pthread_mutex_unlock(&log_mu);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, on_log, NULL));
  rf_session *plain = open_session(&m, 0), *graphed = open_session(&m, 1);

  bool injected = false, refused = false;
  for (int step = 0; step < STEPS;) {
    conf c = confs[rf_test_rand(&rng) % NCONF];
    int64_t rows = batches[rf_test_rand(&rng) % 3];
    int repeats = 1 + (int)(rf_test_rand(&rng) % 4);
    /* A replayed training step, failing. Early, while the session keeps
     * fewer graphs than it may: the plan is sure to be captured. */
    if (!injected && step >= 8) {
      injected = true;
      c = (conf){1, true};
      rows = batches[0];
      pthread_mutex_lock(&log_mu);
      int before = captures;
      pthread_mutex_unlock(&log_mu);
      for (int r = 0; r < 3; r++, step++)
        step_both(&m, plain, graphed, c, rows, &rng, step, false);
      pthread_mutex_lock(&log_mu);
      assert_true(captures > before); /* the next run replays */
      pthread_mutex_unlock(&log_mu);
      step_both(&m, plain, graphed, c, rows, &rng, step++, true);
      assert_ok(rf_session_run(plain, NULL, 0, NULL, 0, m.init, 2, NULL));
      assert_ok(rf_session_run(graphed, NULL, 0, NULL, 0, m.init, 2, NULL));
      continue;
    }
    if (!refused && step >= STEPS / 4) { /* the wrong feed shape */
      refused = true;
      rf_tensor *bad = rf_test_random_tensor(
          &rng, RF_FLOAT32, rf_shape_of(2, rows, IN + 1), -1, 1);
      rf_feed feed = {m.x, bad};
      rf_output f = m.out[1];
      const char *subs[] = {"feed for node 'x'"};
      rf_test_expect_run_error(plain, &feed, 1, &f, 1, RF_INVALID_ARGUMENT,
                               subs, 1);
      rf_test_expect_run_error(graphed, &feed, 1, &f, 1, RF_INVALID_ARGUMENT,
                               subs, 1);
      rf_tensor_release(bad);
    }
    for (int r = 0; r < repeats && step < STEPS; r++, step++)
      step_both(&m, plain, graphed, c, rows, &rng, step, false);
  }

  /* A fresh graphed session (the other keeps its 16 graphs), both from the
   * initial variables; the plain session's runs, on the same GPU, overlap
   * the captures. */
  assert_ok(rf_session_run(plain, NULL, 0, NULL, 0, m.init, 2, NULL));
  rf_session *fresh = open_session(&m, 1);
  worker w[2] = {{&m, plain, fresh, rng ^ 0x9e3779b97f4a7c15u, 0, NULL},
                 {&m, plain, fresh, rng ^ 0x2545f4914f6cdd1du, 0, NULL}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    assert_ok(w[i].err);
    assert_int_equal(w[i].bad, 0);
  }
  assert_ok(rf_set_log_callback(RF_LOG_INFO, NULL, NULL));
  printf("  %d captures; the session's graph limit was reached %d times\n",
         captures, full);
  assert_true(captures > 0);
  assert_true(full > 0); /* 24 plans, 16 graphs at most */
  rf_session_free(fresh);
  rf_session_free(graphed);
  rf_session_free(plain);
  rf_graph_free(m.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mixed_steps_same_bits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
