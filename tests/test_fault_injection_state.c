/* tests/test_fault_injection_state.c - allocation failures (both modes of
 * ringflow/debug.h, swept by tests/fault_sweep.h) in training steps: Adam
 * over 3 CPU devices, data parallel. Device d holds a replica w_d (3, 2) of
 * the weights with its Adam slots m_d, v_d; y_d = x_d w_d, loss = sum_d
 * sum(y_d^2); the gradients of the replicas are all-reduced (sum) and each
 * device applies ApplyAdam to its replica; an Assign counts the steps
 * (steps = steps + 1, on cpu:0). Each step also fetches w_0 as it read it.
 *
 * What the library guarantees (include/ringflow/ops.h, docs/ARCHITECTURE.md):
 * each update op (Assign, ApplyGradientDescent, ApplyAdam) is all or
 * nothing - after a failed step every op's variables hold either their
 * values from before the step or the op's complete update, never a mix (an
 * ApplyAdam's var, m and v move together) - and the session stays usable.
 * A failed step may have applied some of its update ops and not others (the
 * replicas may then differ). The tests check exactly that against a float64
 * reference, and that the next clean step is right from whatever state the
 * failure left. Run time: every k of the steps (about 220 allocations);
 * the session's whole life (about 4700) every k up to 200, then a stride
 * for about 250 more (RF_TEST_FULL_SWEEP=1: every k). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_sweep.h"
#include "ringflow/collectives.h"
#include "testutil.h"

#define ND 3 /* devices */
#define NX 6 /* elements of x_d (2, 3) */
#define NW 6 /* elements of w_d (3, 2) */

static const double LR = 0.05, B1 = 0.9, B2 = 0.999, EPS = 1e-8;

typedef struct train_state {
  double w[ND][NW], m[ND][NW], v[ND][NW];
  double steps;
} train_state;

typedef struct model {
  rf_graph *g;
  rf_output x[ND], init_w[ND], zeros[ND], b1p, b2p;
  rf_output read_w[ND], read_m[ND], read_v[ND], read_steps, loss;
  rf_node *init[3 * ND + 1], *update[ND + 1];
  rf_session *s;
  rf_tensor *xv[ND], *w0;
  rf_tensor *bp[5][2]; /* beta1^t, beta2^t fed at step t */
  train_state before;  /* after init_state */
  uint64_t rng;
  int t; /* Adam's step number for the next step's beta powers */
} model;

static rf_output scalar_const(rf_graph *g, double v) {
  rf_tensor *t;
  rf_shape s = rf_shape_scalar();
  assert_ok(rf_tensor_new(RF_FLOAT64, &s, NULL, &t));
  rf_tensor_set(t, 0, v);
  rf_output o = rf_const(g, NULL, t);
  rf_tensor_release(t);
  return o;
}

static void build(model *md) {
  rf_graph *g = md->g = rf_graph_new();
  rf_output var[ND][3], grads[ND], sums[ND], reduced[ND], loss[ND];
  static const char *const slot[3] = {"w", "m", "v"};
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  md->b1p = rf_placeholder(g, "b1p", RF_FLOAT64, rf_shape_scalar());
  md->b2p = rf_placeholder(g, "b2p", RF_FLOAT64, rf_shape_scalar());
  rf_output steps = rf_variable(g, "steps", RF_FLOAT64, rf_shape_scalar());
  md->read_steps = rf_read_variable(g, NULL, steps);
  rf_graph_pop_device(g);
  for (int d = 0; d < ND; d++) {
    char dev[8], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(g, dev));
    md->x[d] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(2, 2, 3));
    md->init_w[d] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(2, 3, 2));
    md->zeros[d] = rf_zeros_like(g, NULL, md->init_w[d]);
    for (int k = 0; k < 3; k++) {
      snprintf(name, sizeof name, "%s_%d", slot[k], d);
      var[d][k] = rf_variable(g, name, RF_FLOAT64, rf_shape_of(2, 3, 2));
      md->init[3 * d + k] =
          rf_assign(g, NULL, var[d][k], k ? md->zeros[d] : md->init_w[d]);
    }
    md->read_w[d] = rf_read_variable(g, NULL, var[d][0]);
    md->read_m[d] = rf_read_variable(g, NULL, var[d][1]);
    md->read_v[d] = rf_read_variable(g, NULL, var[d][2]);
    rf_output y = rf_matmul(g, NULL, md->x[d], md->read_w[d], false, false);
    loss[d] = rf_sum(g, NULL, rf_mul(g, NULL, y, y), NULL, -1, false);
    rf_graph_pop_device(g);
  }
  assert_ok(rf_graph_status(g));
  assert_ok(rf_gradients(g, loss, ND, md->read_w, ND, NULL, grads));
  rf_all_reduce_n(g, "grads", grads, ND, RF_REDUCE_SUM, reduced);
  for (int d = 0; d < ND; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(g, dev));
    md->update[d] =
        rf_apply_adam(g, NULL, var[d][0], var[d][1], var[d][2], md->b1p,
                      md->b2p, scalar_const(g, LR), scalar_const(g, B1),
                      scalar_const(g, B2), scalar_const(g, EPS), reduced[d]);
    sums[d] = loss[d];
    rf_graph_pop_device(g);
  }
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  md->loss = rf_reduce(g, "loss", sums, ND, RF_REDUCE_SUM);
  md->update[ND] = rf_assign(
      g, "count", steps, rf_add(g, NULL, md->read_steps, scalar_const(g, 1)));
  md->init[3 * ND] = rf_assign(g, NULL, steps, scalar_const(g, 0));
  rf_graph_pop_device(g);
  assert_graph_ok(g);
}

static void read_state(model *md, train_state *s) {
  rf_output f[3 * ND + 1];
  for (int d = 0; d < ND; d++) {
    f[3 * d] = md->read_w[d];
    f[3 * d + 1] = md->read_m[d];
    f[3 * d + 2] = md->read_v[d];
  }
  f[3 * ND] = md->read_steps;
  rf_tensor *out[3 * ND + 1];
  assert_ok(rf_session_run(md->s, NULL, 0, f, 3 * ND + 1, NULL, 0, out));
  for (int d = 0; d < ND; d++)
    for (int i = 0; i < NW; i++) {
      s->w[d][i] = rf_tensor_get(out[3 * d], i);
      s->m[d][i] = rf_tensor_get(out[3 * d + 1], i);
      s->v[d][i] = rf_tensor_get(out[3 * d + 2], i);
    }
  s->steps = rf_tensor_get(out[3 * ND], 0);
  /* released: the variables are their values' only owners again, so the
   * next updates write in place (w_0's copy path is the step's fetch) */
  for (int i = 0; i < 3 * ND + 1; i++) rf_tensor_release(out[i]);
}

static void beta_powers(int t, double *b1p, double *b2p) {
  *b1p = pow(B1, t);
  *b2p = pow(B2, t);
}

/* The float64 reference of one step from s (t: Adam's step number). */
static void reference_step(const model *md, const train_state *s, int t,
                           train_state *out, double *loss) {
  double grad[NW] = {0};
  *loss = 0;
  for (int d = 0; d < ND; d++) {
    double y[2][2];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        y[i][j] = 0;
        for (int k = 0; k < 3; k++)
          y[i][j] += rf_tensor_get(md->xv[d], i * 3 + k) * s->w[d][k * 2 + j];
        *loss += y[i][j] * y[i][j];
      }
    for (int k = 0; k < 3; k++)
      for (int j = 0; j < 2; j++)
        for (int i = 0; i < 2; i++)
          grad[k * 2 + j] += 2 * rf_tensor_get(md->xv[d], i * 3 + k) * y[i][j];
  }
  double b1p, b2p;
  beta_powers(t, &b1p, &b2p);
  double lr_t = LR * sqrt(1 - b2p) / (1 - b1p);
  *out = *s;
  for (int d = 0; d < ND; d++)
    for (int i = 0; i < NW; i++) {
      double g = grad[i];
      out->m[d][i] = B1 * s->m[d][i] + (1 - B1) * g;
      out->v[d][i] = B2 * s->v[d][i] + (1 - B2) * g * g;
      out->w[d][i] =
          s->w[d][i] - lr_t * out->m[d][i] / (sqrt(out->v[d][i]) + EPS);
    }
  out->steps = s->steps + 1;
}

static bool near(double a, double b) {
  return fabs(a - b) <= 1e-9 + 1e-9 * fabs(b);
}

/* Whether replica d's (w, m, v) in a all match b's. */
static bool replica_near(const train_state *a, const train_state *b, int d) {
  for (int i = 0; i < NW; i++)
    if (!near(a->w[d][i], b->w[d][i]) || !near(a->m[d][i], b->m[d][i]) ||
        !near(a->v[d][i], b->v[d][i]))
      return false;
  return true;
}

/* 1: replica d's (w, m, v) in `now` are those of `old` (untouched; Adam's
 * step moves every element far more than the tolerance), 2: those of
 * `next` (updated), 0: neither - a half-applied update. */
static int replica_is(const train_state *now, const train_state *old,
                      const train_state *next, int d) {
  if (replica_near(now, old, d)) return 1;
  return replica_near(now, next, d) ? 2 : 0;
}

static void assert_state_near(const train_state *got, const train_state *want,
                              const char *what) {
  for (int d = 0; d < ND; d++)
    for (int i = 0; i < NW; i++)
      if (!near(got->w[d][i], want->w[d][i]) ||
          !near(got->m[d][i], want->m[d][i]) ||
          !near(got->v[d][i], want->v[d][i]))
        fail_msg(
            "%s: replica %d [%d]: w %.17g m %.17g v %.17g, want %.17g "
            "%.17g %.17g",
            what, d, i, got->w[d][i], got->m[d][i], got->v[d][i], want->w[d][i],
            want->m[d][i], want->v[d][i]);
  if (got->steps != want->steps)
    fail_msg("%s: steps %g, want %g", what, got->steps, want->steps);
}

/* One training step from `before` (Adam step number t): fetches the loss
 * and w_0 as the step read it. On success checks both against the
 * reference; *next receives the reference's state after the step. */
static rf_status *train_step(model *md, const train_state *before, int t,
                             train_state *next) {
  double want_loss;
  reference_step(md, before, t, next, &want_loss);
  rf_feed feeds[ND + 2];
  for (int d = 0; d < ND; d++) feeds[d] = (rf_feed){md->x[d], md->xv[d]};
  feeds[ND] = (rf_feed){md->b1p, md->bp[t][0]};
  feeds[ND + 1] = (rf_feed){md->b2p, md->bp[t][1]};
  rf_output f[2] = {md->loss, md->read_w[0]};
  rf_tensor *out[2] = {NULL, NULL};
  rf_status *st =
      rf_session_run(md->s, feeds, ND + 2, f, 2, md->update, ND + 1, out);
  if (!st) {
    if (!near(rf_tensor_get(out[0], 0), want_loss))
      fail_msg("step %d: loss %.17g, want %.17g", t, rf_tensor_get(out[0], 0),
               want_loss);
    for (int i = 0; i < NW; i++)
      if (!near(rf_tensor_get(out[1], i), before->w[0][i]))
        fail_msg("step %d: w_0 as read [%d] = %.17g, want %.17g", t, i,
                 rf_tensor_get(out[1], i), before->w[0][i]);
  }
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  return st;
}

/* Fresh weights, zero slots, steps = 0; md->before is that state. */
static void init_state(model *md) {
  rf_feed feeds[ND];
  for (int d = 0; d < ND; d++) feeds[d] = (rf_feed){md->init_w[d], md->w0};
  assert_ok(
      rf_session_run(md->s, feeds, ND, NULL, 0, md->init, 3 * ND + 1, NULL));
  read_state(md, &md->before);
}

static void prepare(void *arg) { init_state(arg); }

#define STEPS 3 /* per attempt */

/* Armed: up to STEPS steps in a row, until one fails. Then, clean: the
 * state must be the last good one with each update op either applied whole
 * or not at all; and a next step from it must be right. */
static rf_status *steps_attempt(void *arg) {
  model *md = arg;
  train_state cur = md->before, next, now;
  rf_status *st = NULL;
  int t = 1;
  for (; t <= STEPS && !st; t++) {
    st = train_step(md, &cur, t, &next);
    if (!st) cur = next;
  }
  rf_debug_fail_allocation_after(0);
  read_state(md, &now);
  if (!st) {
    assert_state_near(&now, &cur, "after the steps");
    return NULL;
  }
  /* step t-1 failed: cur is the state before it, next the one after */
  for (int d = 0; d < ND; d++)
    if (!replica_is(&now, &cur, &next, d))
      fail_msg(
          "after a failed step (%s): replica %d half updated: w[0] "
          "%.17g (before %.17g, after %.17g), m[0] %.17g (%.17g, "
          "%.17g)",
          rf_status_message(st), d, now.w[d][0], cur.w[d][0], next.w[d][0],
          now.m[d][0], cur.m[d][0], next.m[d][0]);
  if (now.steps != cur.steps && now.steps != cur.steps + 1)
    fail_msg("after a failed step: steps %g (before %g)", now.steps, cur.steps);
  /* the session goes on from whatever the failure left */
  assert_ok(train_step(md, &now, t, &next));
  train_state after;
  read_state(md, &after);
  assert_state_near(&after, &next, "the step after a failed one");
  return st;
}

static void setup(model *md) {
  memset(md, 0, sizeof *md);
  md->rng = rf_test_seed();
  build(md);
  for (int d = 0; d < ND; d++)
    md->xv[d] = rf_test_random_tensor(&md->rng, RF_FLOAT64,
                                      rf_shape_of(2, 2, 3), -1, 1);
  md->w0 =
      rf_test_random_tensor(&md->rng, RF_FLOAT64, rf_shape_of(2, 3, 2), -1, 1);
  rf_shape sc = rf_shape_scalar();
  for (int t = 0; t <= STEPS + 1; t++)
    for (int k = 0; k < 2; k++) {
      assert_ok(rf_tensor_new(RF_FLOAT64, &sc, NULL, &md->bp[t][k]));
      double b1p, b2p;
      beta_powers(t, &b1p, &b2p);
      rf_tensor_set(md->bp[t][k], 0, k ? b2p : b1p);
    }
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ND;
  o.collective_timeout_ms = 10000;
  assert_ok(rf_session_new(md->g, &o, &md->s));
}

static void teardown(model *md) {
  rf_session_free(md->s);
  rf_graph_free(md->g);
  for (int d = 0; d < ND; d++) rf_tensor_release(md->xv[d]);
  rf_tensor_release(md->w0);
  for (int t = 0; t <= STEPS + 1; t++)
    for (int k = 0; k < 2; k++) rf_tensor_release(md->bp[t][k]);
}

static void test_training_steps(void **state) {
  model md;
  setup(&md);
  init_state(&md);
  assert_ok(steps_attempt(&md)); /* warm-up: every plan compiled */
  fs_plan p = {.what = "training steps",
               .attempt = steps_attempt,
               .arg = &md,
               .first_n = 300,
               .max_attempts = 300,
               .check_leaks = true,
               .warm_up = true,
               .prepare = prepare};
  assert_true(fs_sweep(&p, FS_AFTER).failures > 50);
  assert_true(fs_sweep(&p, FS_ONCE).failures > 50);
  teardown(&md);
}

/* The whole life of a training session under injection: made, initialised,
 * two steps, freed. */
static rf_status *lifecycle_attempt(void *arg) {
  model *md = arg;
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ND;
  o.collective_timeout_ms = 10000;
  rf_session *s = NULL;
  rf_status *st = rf_session_new(md->g, &o, &s);
  rf_feed feeds[ND];
  for (int d = 0; d < ND && !st; d++)
    feeds[d] = (rf_feed){md->init_w[d], md->w0};
  if (!st)
    st = rf_session_run(s, feeds, ND, NULL, 0, md->init, 3 * ND + 1, NULL);
  rf_session *keep = md->s;
  md->s = s;
  train_state cur = md->before, next;
  for (int t = 1; t <= 2 && !st; t++) {
    st = train_step(md, &cur, t, &next);
    cur = next;
  }
  md->s = keep;
  rf_session_free(s);
  return st;
}

static void test_training_session_life(void **state) {
  model md;
  setup(&md);
  init_state(&md); /* md->before: the state every new session starts from */
  assert_ok(lifecycle_attempt(&md));
  fs_plan p = {.what = "training session",
               .attempt = lifecycle_attempt,
               .arg = &md,
               .first_n = 200,
               .max_attempts = 250,
               .check_leaks = true};
  assert_true(fs_sweep(&p, FS_AFTER).failures > 100);
  assert_true(fs_sweep(&p, FS_ONCE).failures > 100);
  teardown(&md);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_training_steps),
      cmocka_unit_test(test_training_session_life),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
