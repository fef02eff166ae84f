/* tests/test_fault_injection.c - Lua's ltests trick on the whole stack, in
 * both modes of ringflow/debug.h (the k-th library allocation and all after
 * it fail; only the k-th fails), swept by tests/fault_sweep.h:
 *  - a graph with gradients and an all-reduce over 3 devices, built,
 *    differentiated, compiled and run;
 *  - all-gather and reduce-scatter with gradients over 3 devices, the whole
 *    life of a session, and then runs of one session made beforehand;
 *  - two threads running one session at once;
 *  - a collective that times out (the watchdog's error path).
 * Each attempt must end in RESOURCE_EXHAUSTED (or succeed with the right
 * values, or the timeout's DEADLINE_EXCEEDED), never crash or hang, and leak
 * nothing; after a failed run the same session must run correctly.
 * Run time: every k up to a bound (100 to 400), then a stride that keeps
 * each sweep to a few hundred attempts (2 cores, ASan and TSan in CI);
 * RF_TEST_FULL_SWEEP=1 takes every k (about 10 s here without sanitizers). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_sweep.h"
#include "ringflow/collectives.h"
#include "device/step.h"
#include "runtime_test_ops.h"
#include "testutil.h"

/* ---- all-reduce with gradients: build, compile, run ---- */

typedef struct ar_case {
  rf_tensor *xv, *wv;
  double want;
} ar_case;

/* Builds, differentiates, compiles and runs; returns the first error. */
static rf_status *ar_attempt_result(ar_case *c, double *result) {
  rf_graph *g = rf_graph_new();
  if (!g) return rf_status_new(RF_RESOURCE_EXHAUSTED, "rf_graph_new");
  rf_output xs[3], ys[3];
  rf_status *st = NULL;
  for (int d = 0; d < 3 && !st; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    st = rf_graph_push_device(g, dev);
    if (st) break;
    rf_output x = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(2, 2, 3));
    rf_output w = rf_const(g, NULL, c->wv);
    xs[d] = rf_relu(g, NULL, rf_matmul(g, NULL, x, w, false, false));
    rf_graph_pop_device(g);
  }
  if (!st) {
    rf_all_reduce_n(g, "sum", xs, 3, RF_REDUCE_SUM, ys);
    rf_graph_push_device(g, "cpu:0");
    rf_output r = rf_reduce(g, "r", ys, 3, RF_REDUCE_SUM);
    rf_output loss = rf_sum(g, NULL, rf_broadcast(g, NULL, r), NULL, -1, false);
    rf_graph_pop_device(g);
    st = rf_graph_status(g);
    rf_output dx[3], xin[3];
    for (int d = 0; d < 3 && !st; d++)
      xin[d] = rf_node_input(rf_node_input(xs[d].node, 0).node, 0);
    if (!st) st = rf_gradients(g, &loss, 1, xin, 3, NULL, dx);
    rf_session *s = NULL;
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_cpu_devices = 3;
    o.collective_timeout_ms = 10000;
    if (!st) st = rf_session_new(g, &o, &s);
    rf_feed feeds[3];
    for (int d = 0; d < 3 && !st; d++) feeds[d] = (rf_feed){xin[d], c->xv};
    rf_output fetches[2] = {loss, dx[0]};
    rf_tensor *out[2] = {NULL, NULL};
    if (!st) st = rf_session_run(s, feeds, 3, fetches, 2, NULL, 0, out);
    if (!st) *result = rf_tensor_get(out[0], 0) + rf_tensor_get(out[1], 0);
    rf_tensor_release(out[0]);
    rf_tensor_release(out[1]);
    rf_session_free(s);
  }
  rf_graph_free(g);
  return st;
}

static rf_status *ar_attempt(void *arg) {
  ar_case *c = arg;
  double got = 0;
  rf_status *st = ar_attempt_result(c, &got);
  if (!st && got != c->want)
    fail_msg("all-reduce attempt: %.17g, want %.17g", got, c->want);
  return st;
}

static void test_all_reduce_graph(void **state) {
  uint64_t rng = rf_test_seed();
  ar_case c;
  c.xv = rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 2, 3), -1, 1);
  c.wv = rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 3, 3), -1, 1);
  assert_ok(ar_attempt_result(&c, &c.want)); /* warm-up: registries filled */
  fs_plan p = {.what = "all-reduce graph",
               .attempt = ar_attempt,
               .arg = &c,
               .first_n = 400,
               .max_attempts = 300,
               .check_leaks = true};
  fs_result r = fs_sweep(&p, FS_AFTER);
  assert_true(r.failures > 100);
  r = fs_sweep(&p, FS_ONCE);
  assert_true(r.failures > 100);
  rf_tensor_release(c.xv);
  rf_tensor_release(c.wv);
}

/* ---- all-gather and reduce-scatter with gradients ----
 * h_d = relu(x_d w) (2, 3) on cpu:d; every device gathers H = [h_0; h_1; h_2]
 * (6, 3) and reduce-scatters the sum of the gathered copies: device d gets
 * rows of 3 H, i.e. 3 h_d. loss = sum_d sum((3 h_d)^2), gathered on cpu:0,
 * and dloss/dx_d = 18 (h_d * [x_d w > 0]) w^T. */

typedef struct gs_graph {
  rf_graph *g;
  rf_output x[3], loss, dx[3];
} gs_graph;

static rf_status *gs_build(gs_graph *m, rf_tensor *wv) {
  m->g = rf_graph_new();
  if (!m->g) return rf_status_new(RF_RESOURCE_EXHAUSTED, "rf_graph_new");
  rf_output h[3], gathered[3], scattered[3], sums[3];
  for (int d = 0; d < 3; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    RF_CHECK(rf_graph_push_device(m->g, dev));
    m->x[d] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(2, 2, 3));
    rf_output w = rf_const(m->g, NULL, wv);
    h[d] = rf_relu(m->g, NULL, rf_matmul(m->g, NULL, m->x[d], w, false, false));
    rf_graph_pop_device(m->g);
  }
  rf_all_gather_n(m->g, "gather", h, 3, gathered);
  rf_reduce_scatter_n(m->g, "scatter", gathered, 3, RF_REDUCE_SUM, scattered);
  for (int d = 0; d < 3; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    RF_CHECK(rf_graph_push_device(m->g, dev));
    sums[d] = rf_sum(m->g, NULL, rf_mul(m->g, NULL, scattered[d], scattered[d]),
                     NULL, -1, false);
    rf_graph_pop_device(m->g);
  }
  RF_CHECK(rf_graph_push_device(m->g, "cpu:0"));
  m->loss = rf_reduce(m->g, "loss", sums, 3, RF_REDUCE_SUM);
  rf_graph_pop_device(m->g);
  RF_CHECK(rf_graph_status(m->g));
  return rf_gradients(m->g, &m->loss, 1, m->x, 3, NULL, m->dx);
}

static rf_session *gs_session_opts(const rf_graph *g, rf_session **out,
                                   rf_status **st) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 3;
  o.collective_timeout_ms = 10000;
  *st = rf_session_new(g, &o, out);
  return *st ? NULL : *out;
}

typedef struct gs_case {
  rf_tensor *xv[3], *wv;
  double want[4][6]; /* loss, then dx_d */
  gs_graph shared;   /* for the runs of one session */
  rf_session *s;
} gs_case;

/* One run; on success compares with c->want exactly (the clean run was
 * checked against the float64 reference). */
static rf_status *gs_run(gs_case *c, rf_session *s, const gs_graph *m) {
  rf_feed feeds[3];
  for (int d = 0; d < 3; d++) feeds[d] = (rf_feed){m->x[d], c->xv[d]};
  rf_output fetches[4] = {m->loss, m->dx[0], m->dx[1], m->dx[2]};
  rf_tensor *out[4] = {NULL};
  rf_status *st = rf_session_run(s, feeds, 3, fetches, 4, NULL, 0, out);
  for (int i = 0; !st && i < 4; i++) {
    int64_t n = rf_tensor_num_elements(out[i]);
    for (int64_t j = 0; j < n; j++)
      if (rf_tensor_get(out[i], j) != c->want[i][j])
        fail_msg("gather/scatter: fetch %d [%lld] = %.17g, want %.17g", i,
                 (long long)j, rf_tensor_get(out[i], j), c->want[i][j]);
  }
  for (int i = 0; i < 4; i++) rf_tensor_release(out[i]);
  return st;
}

static rf_status *gs_lifecycle(void *arg) {
  gs_case *c = arg;
  gs_graph m;
  rf_session *s = NULL;
  rf_status *st = gs_build(&m, c->wv);
  if (!st) gs_session_opts(m.g, &s, &st);
  if (!st) st = gs_run(c, s, &m);
  rf_session_free(s);
  rf_graph_free(m.g);
  return st;
}

/* A failed run of a session made beforehand; the next run must work. */
static rf_status *gs_run_then_again(void *arg) {
  gs_case *c = arg;
  rf_status *st = gs_run(c, c->s, &c->shared);
  rf_debug_fail_allocation_after(0);
  assert_ok(gs_run(c, c->s, &c->shared));
  return st;
}

static void gs_reference(gs_case *c) {
  double loss = 0;
  for (int d = 0; d < 3; d++) {
    double h[2][3], dh[2][3];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) {
        double a = 0;
        for (int k = 0; k < 3; k++)
          a += rf_tensor_get(c->xv[d], i * 3 + k) *
               rf_tensor_get(c->wv, k * 3 + j);
        h[i][j] = a > 0 ? a : 0;
        dh[i][j] = a > 0 ? 18 * h[i][j] : 0;
        loss += 9 * h[i][j] * h[i][j];
      }
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 3; k++) {
        double a = 0;
        for (int j = 0; j < 3; j++)
          a += dh[i][j] * rf_tensor_get(c->wv, k * 3 + j);
        c->want[1 + d][i * 3 + k] = a;
      }
  }
  c->want[0][0] = loss;
}

static void gs_setup(gs_case *c, uint64_t salt) {
  uint64_t rng = rf_test_seed() + salt;
  for (int d = 0; d < 3; d++)
    c->xv[d] =
        rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 2, 3), -1, 1);
  c->wv = rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 3, 3), -1, 1);
  /* the clean run against the float64 reference; its values become exact
   * expectations (runs are deterministic) */
  gs_reference(c);
  double ref[4][6];
  memcpy(ref, c->want, sizeof ref);
  assert_ok(gs_build(&c->shared, c->wv));
  rf_status *st;
  assert_non_null(gs_session_opts(c->shared.g, &c->s, &st));
  rf_feed feeds[3];
  for (int d = 0; d < 3; d++) feeds[d] = (rf_feed){c->shared.x[d], c->xv[d]};
  rf_output fetches[4] = {c->shared.loss, c->shared.dx[0], c->shared.dx[1],
                          c->shared.dx[2]};
  rf_tensor *out[4];
  assert_ok(rf_session_run(c->s, feeds, 3, fetches, 4, NULL, 0, out));
  assert_tensor_near(out[0], rf_shape_scalar(), ref[0], 1e-12);
  for (int d = 0; d < 3; d++) {
    assert_tensor_near(out[1 + d], rf_shape_of(2, 2, 3), ref[1 + d], 1e-12);
    for (int j = 0; j < 6; j++)
      c->want[1 + d][j] = rf_tensor_get(out[1 + d], j);
  }
  c->want[0][0] = rf_tensor_get(out[0], 0);
  for (int i = 0; i < 4; i++) rf_tensor_release(out[i]);
}

static void gs_teardown(gs_case *c) {
  rf_session_free(c->s);
  rf_graph_free(c->shared.g);
  for (int d = 0; d < 3; d++) rf_tensor_release(c->xv[d]);
  rf_tensor_release(c->wv);
}

static void test_gather_scatter_gradients(void **state) {
  gs_case c;
  gs_setup(&c, 11);
  assert_ok(gs_lifecycle(&c)); /* warm-up */
  fs_plan p = {.what = "gather/scatter session",
               .attempt = gs_lifecycle,
               .arg = &c,
               .first_n = 300,
               .max_attempts = 250,
               .check_leaks = true};
  assert_true(fs_sweep(&p, FS_AFTER).failures > 100);
  assert_true(fs_sweep(&p, FS_ONCE).failures > 100);
  /* the runs of one session, several in a row: a failed one, then one that
   * must succeed (the plan is compiled: the step's own allocations fail) */
  fs_plan q = {.what = "gather/scatter runs",
               .attempt = gs_run_then_again,
               .arg = &c,
               .first_n = 200,
               .max_attempts = 200,
               .check_leaks = true,
               .warm_up = true};
  assert_true(fs_sweep(&q, FS_AFTER).failures > 20);
  assert_true(fs_sweep(&q, FS_ONCE).failures > 20);
  gs_teardown(&c);
}

/* ---- two threads, one session ---- */

/* Both runs start together (a barrier); each must end in
 * RESOURCE_EXHAUSTED or the right values, and the session must run correctly
 * afterwards. */
typedef struct concurrent_case {
  gs_case *c;
  pthread_barrier_t go;
  rf_status *st[2];
} concurrent_case;

typedef struct concurrent_arg {
  concurrent_case *cc;
  int me;
} concurrent_arg;

static void *concurrent_main(void *arg) {
  concurrent_arg *a = arg;
  pthread_barrier_wait(&a->cc->go);
  a->cc->st[a->me] = gs_run(a->cc->c, a->cc->c->s, &a->cc->c->shared);
  return NULL;
}

static rf_status *concurrent_attempt(void *arg) {
  concurrent_case *cc = arg;
  pthread_t th[2];
  concurrent_arg a[2] = {{cc, 0}, {cc, 1}};
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, concurrent_main, &a[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  rf_debug_fail_allocation_after(0);
  assert_ok(gs_run(cc->c, cc->c->s, &cc->c->shared));
  /* one status for the sweep: the first error, the other checked here */
  rf_status *st = cc->st[0] ? cc->st[0] : cc->st[1];
  rf_status *other = cc->st[0] ? cc->st[1] : NULL;
  if (other && rf_status_code(other) != RF_RESOURCE_EXHAUSTED)
    fail_msg("concurrent run: %s: %s", rf_code_name(rf_status_code(other)),
             rf_status_message(other));
  rf_status_free(other);
  return st;
}

static void test_concurrent_runs(void **state) {
  gs_case c;
  gs_setup(&c, 23);
  concurrent_case cc = {.c = &c};
  pthread_barrier_init(&cc.go, NULL, 2);
  assert_ok(concurrent_attempt(&cc)); /* warm-up */
  fs_plan p = {.what = "two concurrent runs",
               .attempt = concurrent_attempt,
               .arg = &cc,
               .first_n = 100,
               .max_attempts = 150,
               .check_leaks = true,
               .warm_up = true};
  assert_true(fs_sweep(&p, FS_AFTER).failures > 20);
  assert_true(fs_sweep(&p, FS_ONCE).failures > 20);
  pthread_barrier_destroy(&cc.go);
  gs_teardown(&c);
}

/* ---- the watchdog: a collective that times out ----
 * cpu:2's participant of 'late' is held back until the step is cancelled
 * (TestUntilCancelled, below; at most 10 s), so only the watchdog can end
 * the step: after the 10 ms collective timeout it fails the others with
 * DEADLINE_EXCEEDED naming cpu:2, which cancels the step. Under injection an
 * attempt ends in that error or in RESOURCE_EXHAUSTED; the session's next run
 * (a good collective) works. */

/* TestUntilCancelled(x: float64) -> x, once the step is cancelled (polled
 * every millisecond from a thread of its own), or after 10 s. */
typedef struct until_job {
  rf__kernel_ctx *ctx;
  rf__done_fn done;
} until_job;

static void *until_main(void *arg) {
  until_job *u = arg;
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 10000 && !atomic_load(&u->ctx->step->cancelled); i++)
    nanosleep(&ms, NULL);
  rf__kernel_forward_input(u->ctx, 0, 0);
  u->done(u->ctx, NULL);
  free(u);
  return NULL;
}

static void until_cancelled(rf__kernel_ctx *ctx, rf__done_fn done) {
  until_job *u = malloc(sizeof *u);
  pthread_t t;
  if (u && ctx->step) {
    *u = (until_job){ctx, done};
    if (pthread_create(&t, NULL, until_main, u) == 0) {
      pthread_detach(t);
      return;
    }
  }
  free(u);
  done(ctx, rf__kernel_error(ctx, RF_INTERNAL, "TestUntilCancelled"));
}

static void register_until_cancelled(void) {
  rt_register();
  static const rf__op_spec spec = {.name = "TestUntilCancelled",
                                   .inputs = "x: float64",
                                   .outputs = "y: float64",
                                   .shape = rt_same_shape};
  static const rf__kernel_def kernel = {.op = "TestUntilCancelled",
                                        .device_type = RF_DEVICE_CPU,
                                        .compute_async = until_cancelled};
  assert_ok(rf__op_register(&spec));
  assert_ok(rf__kernel_register(&kernel));
}

typedef struct wd_case {
  rf_graph *g;
  rf_output x[3], late[3], good[3];
  rf_tensor *xv;
  rf_session *s; /* for the runs of one session */
} wd_case;

static rf_status *wd_session(wd_case *c, rf_session **out) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 3;
  o.collective_timeout_ms = 10;
  return rf_session_new(c->g, &o, out);
}

static rf_status *wd_late_run(wd_case *c, rf_session *s) {
  rf_feed feeds[3];
  for (int d = 0; d < 3; d++) feeds[d] = (rf_feed){c->x[d], c->xv};
  rf_tensor *out[2] = {NULL, NULL};
  rf_status *st = rf_session_run(s, feeds, 3, c->late, 2, NULL, 0, out);
  if (!st) fail_msg("the late collective succeeded");
  if (rf_status_code(st) == RF_DEADLINE_EXCEEDED &&
      !strstr(rf_status_message(st), "waiting for cpu:2"))
    fail_msg("timeout without naming cpu:2: %s", rf_status_message(st));
  return st;
}

static void wd_good_run(wd_case *c, rf_session *s) {
  rf_feed feeds[3];
  for (int d = 0; d < 3; d++) feeds[d] = (rf_feed){c->x[d], c->xv};
  rf_tensor *out[3] = {NULL};
  assert_ok(rf_session_run(s, feeds, 3, c->good, 3, NULL, 0, out));
  for (int d = 0; d < 3; d++) {
    for (int64_t i = 0; i < 5; i++)
      assert_true(rf_tensor_get(out[d], i) == 3 * rf_tensor_get(c->xv, i));
    rf_tensor_release(out[d]);
  }
}

static rf_status *wd_lifecycle(void *arg) {
  wd_case *c = arg;
  rf_session *s = NULL;
  rf_status *st = wd_session(c, &s);
  if (!st) st = wd_late_run(c, s);
  rf_session_free(s);
  return st;
}

static rf_status *wd_runs(void *arg) {
  wd_case *c = arg;
  rf_status *st = wd_late_run(c, c->s);
  rf_debug_fail_allocation_after(0);
  wd_good_run(c, c->s);
  return st;
}

static void test_collective_timeout(void **state) {
  register_until_cancelled();
  uint64_t rng = rf_test_seed() + 31;
  wd_case c;
  c.g = rf_graph_new();
  for (int d = 0; d < 3; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(c.g, dev));
    c.x[d] = rf_placeholder(c.g, NULL, RF_FLOAT64, rf_shape_of(1, 5));
    rf_graph_pop_device(c.g);
  }
  rf_all_reduce_n(c.g, "late", c.x, 3, RF_REDUCE_SUM, c.late);
  rf_output nap =
      rt_unary_node(c.g, "TestUntilCancelled", "until", "cpu:2", c.x[2]);
  assert_ok(rf_graph_add_control_edge(c.g, nap.node, c.late[2].node));
  rf_all_reduce_n(c.g, "good", c.x, 3, RF_REDUCE_SUM, c.good);
  assert_graph_ok(c.g);
  c.xv = rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, 5), -1, 1);
  assert_ok(wd_session(&c, &c.s));
  wd_good_run(&c, c.s);
  rf_status_free(wd_late_run(&c, c.s)); /* warm-up: plans compiled */
  /* an attempt that gets to the step waits for the timeout */
  fs_plan p = {.what = "collective timeout, whole session",
               .attempt = wd_lifecycle,
               .arg = &c,
               .first_n = 100,
               .max_attempts = 200,
               .also_ok = RF_DEADLINE_EXCEEDED,
               .check_leaks = true};
  fs_sweep(&p, FS_AFTER);
  fs_sweep(&p, FS_ONCE);
  fs_plan q = {.what = "collective timeout, runs",
               .attempt = wd_runs,
               .arg = &c,
               .first_n = 100,
               .max_attempts = 100,
               .also_ok = RF_DEADLINE_EXCEEDED,
               .check_leaks = true,
               .warm_up = true};
  assert_true(fs_sweep(&q, FS_AFTER).failures > 5);
  assert_true(fs_sweep(&q, FS_ONCE).failures > 5);
  rf_session_free(c.s);
  rf_tensor_release(c.xv);
  rf_graph_free(c.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce_graph),
      cmocka_unit_test(test_gather_scatter_gradients),
      cmocka_unit_test(test_concurrent_runs),
      cmocka_unit_test(test_collective_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
