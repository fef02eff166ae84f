/* tests/test_session_teardown.c - sessions made and freed in a loop right
 * after steps whose collectives just finished or failed, from two threads at
 * once (virtual CPU devices, no MPI). The thread that delivers a
 * collective's results (a pool worker, the collective manager's watchdog on
 * a timeout) may still be inside the collective code when the step's last
 * participant is done and the run returns: rf_session_free must wait for it
 * rather than free the manager, the pool or the devices under it. Meant for
 * the ThreadSanitizer and AddressSanitizer trees (-DRF_SANITIZE=...), where a
 * use after free or a race is a failure; elsewhere it checks the values and
 * the errors. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "testutil.h"

#define NDEV 4
#define LOOPS 60

typedef struct net {
  rf_graph *g;
  rf_output x[NDEV], sum[NDEV], gathered[NDEV];
} net;

/* x on cpu:d ([?] float64) reshaped to [3]; sum the all-reduce of those,
 * gathered their all-gather. */
static void build(net *m) {
  m->g = rf_graph_new();
  rf_output r[NDEV];
  for (int d = 0; d < NDEV; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(m->g, dev));
    m->x[d] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(1, -1));
    r[d] = rf_reshape_to(m->g, NULL, m->x[d], 1, (int64_t[]){3});
    rf_graph_pop_device(m->g);
  }
  rf_all_reduce_n(m->g, "sum", r, NDEV, RF_REDUCE_SUM, m->sum);
  rf_all_gather_n(m->g, "all", r, NDEV, m->gathered);
  assert_graph_ok(m->g);
}

typedef struct worker {
  net *m;
  uint64_t rng;
  int ok, failed;
} worker;

/* One session: a full step (checked against float64), then a step whose
 * Reshape on device 0 fails (4 elements), so the all-gather's participants
 * on the other devices are cancelled or time out; freed at once. */
static void one_session(worker *w) {
  net *m = w->m;
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = NDEV;
  o.collective_timeout_ms = 20;
  rf_session *s = NULL;
  assert_ok(rf_session_new(m->g, &o, &s));
  rf_tensor *in[NDEV];
  rf_feed feeds[NDEV];
  double want[3] = {0};
  for (int d = 0; d < NDEV; d++) {
    in[d] =
        rf_test_random_tensor(&w->rng, RF_FLOAT64, rf_shape_of(1, 3), -1, 1);
    feeds[d] = (rf_feed){m->x[d], in[d]};
    for (int i = 0; i < 3; i++) want[i] += rf_tensor_get(in[d], i);
  }
  rf_tensor *out[NDEV] = {0};
  assert_ok(rf_session_run(s, feeds, NDEV, m->sum, NDEV, NULL, 0, out));
  for (int d = 0; d < NDEV; d++) {
    assert_tensor_near(out[d], rf_shape_of(1, 3), want, 1e-12);
    rf_tensor_release(out[d]);
  }
  w->ok++;
  /* device 0 is not fed: its placeholder fails, the others' all-gather
   * participants are cancelled or time out */
  rf_status *st = rf_session_run(s, feeds + 1, NDEV - 1, m->gathered + 1,
                                 NDEV - 1, NULL, 0, out);
  assert_non_null(st);
  rf_status_free(st);
  w->failed++;
  rf_session_free(s);
  for (int d = 0; d < NDEV; d++) rf_tensor_release(in[d]);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  for (int i = 0; i < LOOPS; i++) one_session(w);
  return NULL;
}

static void test_sessions_freed_after_collectives(void **state) {
  net m;
  build(&m);
  worker w[2] = {{&m, rf_test_rng(1), 0, 0}, {&m, rf_test_rng(2), 0, 0}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, worker_main, &w[1]), 0);
  worker_main(&w[0]);
  pthread_join(t, NULL);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(w[i].ok, LOOPS);
    assert_int_equal(w[i].failed, LOOPS);
  }
  rf_graph_free(m.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sessions_freed_after_collectives),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
