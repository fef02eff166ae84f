/* tests/test_log_concurrent.c - the log sink (ringflow/log.h) under
 * concurrency (a concurrency test: CI runs it under ThreadSanitizer): four
 * sessions on 2..4 CPU devices compile and run collectives at once, each
 * with every message delivered whole, while another thread keeps replacing
 * the callback (each call gets its own user pointer, never another's; none
 * runs once logging is off). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log_collector.h"
#include "ringflow/collectives.h"

#define THREADS 4
#define STEPS 12

static const rf_shape vec3 = {1, {3}};

typedef struct worker {
  int id, ndev;
  uint64_t seed;
} worker;

/* Session `w`: an all-reduce (t<id>_sum) and a Reduce then Broadcast
 * (t<id>_total, t<id>_share) over 2..4 devices, run STEPS times with fresh
 * inputs, results checked against float64 sums. */
static void *work(void *arg) {
  const worker *w = arg;
  uint64_t rng = w->seed;
  rf_graph *g = rf_graph_new();
  rf_output x[4], sum[4], use[4];
  char name[32];
  for (int i = 0; i < w->ndev; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(name, sizeof name, "x%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    x[i] = rf_placeholder(g, name, RF_FLOAT64, vec3);
    rf_graph_pop_device(g);
  }
  snprintf(name, sizeof name, "t%d_sum", w->id);
  rf_all_reduce_n(g, name, x, w->ndev, RF_REDUCE_SUM, sum);
  snprintf(name, sizeof name, "t%d_total", w->id);
  rf_output total = rf_reduce(g, name, x, w->ndev, RF_REDUCE_SUM);
  snprintf(name, sizeof name, "t%d_share", w->id);
  rf_output share = rf_broadcast(g, name, total);
  for (int i = 0; i < w->ndev; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    use[i] = rf_add(g, NULL, share, sum[i]); /* 2 * sum */
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = w->ndev;
  o.num_threads = 2;
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  for (int step = 0; step < STEPS; step++) {
    rf_tensor *t[4], *out[4];
    rf_feed feeds[4];
    double want[3] = {0};
    for (int i = 0; i < w->ndev; i++) {
      t[i] = rf_test_random_tensor(&rng, RF_FLOAT64, vec3, -2, 2);
      feeds[i] = (rf_feed){x[i], t[i]};
      for (int e = 0; e < 3; e++) want[e] += 2 * rf_tensor_get(t[i], e);
    }
    assert_ok(rf_session_run(s, feeds, w->ndev, use, w->ndev, NULL, 0, out));
    for (int i = 0; i < w->ndev; i++) {
      assert_tensor_near(out[i], vec3, want, 1e-12);
      rf_tensor_release(out[i]);
      rf_tensor_release(t[i]);
    }
  }
  rf_session_free(s);
  rf_graph_free(g);
  return NULL;
}

static void run_workers(worker *w) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){i, 2 + i % 3, rf_test_rng((uint64_t)i + 1)};
    assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

static void test_concurrent_sessions_log_at_once(void **state) {
  (void)state;
  logs_start(RF_LOG_DEBUG);
  worker w[THREADS];
  run_workers(w);
  for (int i = 0; i < THREADS; i++) {
    char group[64], devs[64] = "";
    for (int d = 0; d < w[i].ndev; d++)
      snprintf(devs + strlen(devs), sizeof devs - strlen(devs), "%scpu:%d",
               d ? "," : "", d);
    /* each step formed each of the session's three groups once */
    const char *kinds[] = {"sum", "total", "share"};
    for (int k = 0; k < 3; k++) {
      snprintf(group, sizeof group, "collective: group 't%d_%s' step ", i,
               kinds[k]);
      assert_int_equal(logs_count(RF_LOG_DEBUG, group, " formed: ", NULL),
                       STEPS);
    }
    snprintf(group, sizeof group, "collective: 't%d_sum' (AllReduce)", i);
    assert_logged(RF_LOG_DEBUG, group, devs, NULL);
  }
  pthread_mutex_lock(&logs.mu);
  for (int i = 0; i < logs.n; i++) assert_null(strchr(logs.msgs[i], '\n'));
  pthread_mutex_unlock(&logs.mu);
}

/* ---- replacing the callback while sessions log ---- */

static atomic_int stray;     /* calls with another callback's user pointer */
static atomic_int after_off; /* calls after logging was turned off */
static atomic_int off;
static atomic_int calls_a, calls_b;

static void cb_a(rf_log_level level, const char *msg, void *user) {
  (void)level, (void)msg;
  if (user != &calls_a) atomic_fetch_add(&stray, 1);
  if (atomic_load(&off)) atomic_fetch_add(&after_off, 1);
  atomic_fetch_add(&calls_a, 1);
}

static void cb_b(rf_log_level level, const char *msg, void *user) {
  (void)level, (void)msg;
  if (user != &calls_b) atomic_fetch_add(&stray, 1);
  if (atomic_load(&off)) atomic_fetch_add(&after_off, 1);
  atomic_fetch_add(&calls_b, 1);
}

#define TOGGLES 60
static atomic_int toggled; /* TOGGLES: done */

/* Installs cb_a (debug), cb_b (info), nothing, cb_a, ... */
static void *toggle(void *arg) {
  (void)arg;
  for (int i = 0; i < TOGGLES; i++) {
    if (i % 3 == 0)
      assert_ok(rf_set_log_callback(RF_LOG_DEBUG, cb_a, &calls_a));
    else if (i % 3 == 1)
      assert_ok(rf_set_log_callback(RF_LOG_INFO, cb_b, &calls_b));
    else
      assert_ok(rf_set_log_callback(RF_LOG_DEBUG, NULL, NULL));
    struct timespec ts = {0, 500000};
    nanosleep(&ts, NULL);
    atomic_store(&toggled, i + 1);
  }
  return NULL;
}

static void test_set_while_sessions_run(void **state) {
  (void)state;
  atomic_store(&stray, 0);
  atomic_store(&after_off, 0);
  atomic_store(&off, 0);
  atomic_store(&toggled, 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, toggle, NULL), 0);
  worker w[THREADS];
  while (atomic_load(&toggled) < TOGGLES) run_workers(w);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&stray), 0);
  assert_true(atomic_load(&calls_a) + atomic_load(&calls_b) > 0);
  /* Off: once the setter returns no callback runs, even while sessions do. */
  assert_ok(rf_set_log_callback(RF_LOG_DEBUG, cb_a, &calls_a));
  pthread_t bg;
  assert_int_equal(pthread_create(&bg, NULL, work, &w[2]), 0);
  assert_ok(rf_set_log_callback(RF_LOG_DEBUG, NULL, NULL));
  atomic_store(&off, 1);
  pthread_join(bg, NULL);
  run_workers(w);
  assert_int_equal(atomic_load(&after_off), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_concurrent_sessions_log_at_once,
                                logs_stop),
      cmocka_unit_test_teardown(test_set_while_sessions_run, logs_stop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
