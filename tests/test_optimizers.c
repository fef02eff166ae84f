/* tests/test_optimizers.c - ApplyMomentum (plain and Nesterov) and ApplyAdamW
 * through a session: several steps on fresh random data, every float dtype,
 * against float64 references written from the formulas in ringflow/ops.h
 * (TensorFlow's ApplyMomentum, PyTorch's AdamW), with the scalars changing
 * between steps; and every error path: non-scalar hyper-parameters, grads of
 * another dtype or shape (at build and at run time), a non-float dtype, a
 * value where a handle belongs, one variable passed twice and an
 * uninitialised slot, each leaving the variables as they were. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const rf_dtype float_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                        RF_FLOAT64};

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

static rf_session *new_session(rf_graph *g) {
  rf_session_options o;
  rf_session_options_init(&o);
  rf_session *s = NULL;
  assert_graph_ok(g);
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static rf_tensor *scalar(rf_dtype dt, double v) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_scalar(dt, v, &t));
  return t;
}

/* v as stored in dtype dt (the kernels see stored values). */
static double stored(rf_dtype dt, double v) {
  rf_tensor *t = scalar(dt, v);
  double r = rf_tensor_get(t, 0);
  rf_tensor_release(t);
  return r;
}

static void round_to(rf_dtype dt, double *vals, int64_t n) {
  for (int64_t i = 0; i < n; i++) vals[i] = stored(dt, vals[i]);
}

/* A variable with an "init" placeholder, its Assign and a ReadVariable. */
typedef struct var_graph {
  rf_output var, init, read;
  rf_node *assign;
} var_graph;

static var_graph add_variable(rf_graph *g, const char *name, rf_dtype dt,
                              rf_shape shape) {
  char buf[64];
  var_graph v;
  v.var = rf_variable(g, name, dt, shape);
  snprintf(buf, sizeof buf, "%s_init", name);
  v.init = rf_placeholder(g, buf, dt, shape);
  snprintf(buf, sizeof buf, "%s_assign", name);
  v.assign = rf_assign(g, buf, v.var, v.init);
  snprintf(buf, sizeof buf, "%s_read", name);
  v.read = rf_read_variable(g, buf, v.var);
  return v;
}

static void init_variable(rf_session *s, const var_graph *v, rf_tensor *value) {
  rf_feed feed = {v->init, value};
  assert_ok(rf_session_run(s, &feed, 1, NULL, 0, &v->assign, 1, NULL));
}

/* A gradient with |g| in [0.5, 1.5) and random signs: v stays clear of
 * 16-bit underflow. */
static rf_tensor *random_grad(rf_dtype dt, rf_shape shape) {
  rf_tensor *gv = rf_test_random_tensor(&rng, dt, shape, 0.5, 1.5);
  for (int64_t i = 0; i < rf_tensor_num_elements(gv); i++)
    if (rf_test_rand(&rng) & 1) rf_tensor_set(gv, i, -rf_tensor_get(gv, i));
  return gv;
}

/* Fetches the reads and compares them with refs[0, n). */
static void assert_state(rf_session *s, const rf_output *reads,
                         double *const *refs, int n, rf_shape shape,
                         rf_dtype dt) {
  rf_tensor *outs[3];
  assert_ok(rf_session_run(s, NULL, 0, reads, n, NULL, 0, outs));
  for (int k = 0; k < n; k++) {
    assert_int_equal(rf_tensor_dtype(outs[k]), dt);
    assert_tensor_near(outs[k], shape, refs[k], rf_test_tolerance(dt));
    rf_tensor_release(outs[k]);
  }
}

/* Large enough for the update to be split over the thread pool. */
static rf_shape big_shape(void) { return rf_shape_of(2, 37, 211); }

/* Four momentum steps, lr and momentum fed per step. */
static void momentum_steps(rf_dtype dt, bool nesterov) {
  rf_shape shape = big_shape();
  int64_t n = rf_shape_num_elements(&shape);
  rf_graph *g = rf_graph_new();
  var_graph x = add_variable(g, "x", dt, shape);
  var_graph acc = add_variable(g, "acc", dt, shape);
  rf_output lr = rf_placeholder(g, "lr", dt, rf_shape_scalar());
  rf_output mu = rf_placeholder(g, "mu", dt, rf_shape_scalar());
  rf_output grad = rf_placeholder(g, "grad", dt, shape);
  rf_node *up =
      rf_apply_momentum(g, "momentum", x.var, acc.var, lr, grad, mu, nesterov);
  assert_non_null(up);
  rf_session *s = new_session(g);
  rf_tensor *xv = rf_test_random_tensor(&rng, dt, shape, -1, 1);
  rf_tensor *av = rf_test_random_tensor(&rng, dt, shape, -0.5, 0.5);
  double *rx = rf_test_to_doubles(xv), *ra = rf_test_to_doubles(av);
  init_variable(s, &x, xv);
  init_variable(s, &acc, av);
  for (int t = 1; t <= 4; t++) {
    rf_tensor *lrv = scalar(dt, 0.01 * t), *muv = scalar(dt, 0.95 - 0.1 * t);
    double l = rf_tensor_get(lrv, 0), m = rf_tensor_get(muv, 0);
    rf_tensor *gv = random_grad(dt, shape);
    for (int64_t i = 0; i < n; i++) {
      double gi = rf_tensor_get(gv, i);
      ra[i] = m * ra[i] + gi;
      rx[i] -= nesterov ? l * gi + l * m * ra[i] : l * ra[i];
    }
    round_to(dt, rx, n);
    round_to(dt, ra, n);
    rf_feed feeds[3] = {{lr, lrv}, {mu, muv}, {grad, gv}};
    assert_ok(rf_session_run(s, feeds, 3, NULL, 0, &up, 1, NULL));
    rf_tensor_release(lrv);
    rf_tensor_release(muv);
    rf_tensor_release(gv);
  }
  rf_output reads[2] = {x.read, acc.read};
  double *refs[2] = {rx, ra};
  assert_state(s, reads, refs, 2, shape, dt);
  free(rx);
  free(ra);
  rf_tensor_release(xv);
  rf_tensor_release(av);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_momentum(void **state) {
  (void)state;
  for (int d = 0; d < 4; d++) momentum_steps(float_dtypes[d], false);
}

static void test_momentum_nesterov(void **state) {
  (void)state;
  for (int d = 0; d < 4; d++) momentum_steps(float_dtypes[d], true);
}

/* Four AdamW steps against ops.h's formula: m_hat, v_hat, then
 * var -= lr (m_hat / (sqrt(v_hat) + eps) + wd var). The powers and lr are
 * fed per step, as a schedule does. */
static void test_adamw(void **state) {
  (void)state;
  for (int d = 0; d < 4; d++) {
    rf_dtype dt = float_dtypes[d];
    const double b1 = stored(dt, 0.9), b2 = stored(dt, 0.999);
    const double eps = stored(dt, 1e-3), wd = stored(dt, 0.5);
    rf_shape shape = big_shape();
    int64_t n = rf_shape_num_elements(&shape);
    rf_graph *g = rf_graph_new();
    var_graph x = add_variable(g, "x", dt, shape);
    var_graph m = add_variable(g, "m", dt, shape);
    var_graph v = add_variable(g, "v", dt, shape);
    rf_output b1p = rf_placeholder(g, "b1p", dt, rf_shape_scalar());
    rf_output b2p = rf_placeholder(g, "b2p", dt, rf_shape_scalar());
    rf_output lr = rf_placeholder(g, "lr", dt, rf_shape_scalar());
    rf_output grad = rf_placeholder(g, "grad", dt, shape);
    rf_node *up = rf_apply_adamw(g, "adamw", x.var, m.var, v.var, b1p, b2p, lr,
                                 rf_const_scalar(g, "b1", dt, b1),
                                 rf_const_scalar(g, "b2", dt, b2),
                                 rf_const_scalar(g, "eps", dt, eps),
                                 rf_const_scalar(g, "wd", dt, wd), grad);
    assert_non_null(up);
    rf_session *s = new_session(g);
    rf_tensor *xv = rf_test_random_tensor(&rng, dt, shape, -1, 1);
    rf_tensor *zeros = rf_test_random_tensor(&rng, dt, shape, 0, 0);
    double *rx = rf_test_to_doubles(xv), *rm = calloc((size_t)n, 8),
           *rv = calloc((size_t)n, 8);
    init_variable(s, &x, xv);
    init_variable(s, &m, zeros);
    init_variable(s, &v, zeros);
    double p1 = 1, p2 = 1;
    for (int t = 1; t <= 4; t++) {
      p1 *= b1;
      p2 *= b2;
      rf_tensor *gv = random_grad(dt, shape);
      rf_tensor *p1v = scalar(dt, p1), *p2v = scalar(dt, p2);
      rf_tensor *lrv = scalar(dt, 0.02 / t);
      double q1 = rf_tensor_get(p1v, 0), q2 = rf_tensor_get(p2v, 0);
      double l = rf_tensor_get(lrv, 0);
      for (int64_t i = 0; i < n; i++) {
        double gi = rf_tensor_get(gv, i);
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        double mh = rm[i] / (1 - q1), vh = rv[i] / (1 - q2);
        rx[i] -= l * (mh / (sqrt(vh) + eps) + wd * rx[i]);
      }
      round_to(dt, rx, n);
      round_to(dt, rm, n);
      round_to(dt, rv, n);
      rf_feed feeds[4] = {{b1p, p1v}, {b2p, p2v}, {lr, lrv}, {grad, gv}};
      assert_ok(rf_session_run(s, feeds, 4, NULL, 0, &up, 1, NULL));
      rf_tensor_release(gv);
      rf_tensor_release(p1v);
      rf_tensor_release(p2v);
      rf_tensor_release(lrv);
    }
    rf_output reads[3] = {x.read, m.read, v.read};
    double *refs[3] = {rx, rm, rv};
    assert_state(s, reads, refs, 3, shape, dt);
    for (int k = 0; k < 3; k++) free(refs[k]);
    rf_tensor_release(xv);
    rf_tensor_release(zeros);
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* Weight decay alone: with a zero gradient (m = v = 0) AdamW only scales
 * var by 1 - lr wd; nothing divides by zero. */
static void test_adamw_decay_only(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 5);
  rf_graph *g = rf_graph_new();
  var_graph x = add_variable(g, "x", RF_FLOAT64, shape);
  var_graph m = add_variable(g, "m", RF_FLOAT64, shape);
  var_graph v = add_variable(g, "v", RF_FLOAT64, shape);
  rf_output c[7];
  const double vals[7] = {0.9, 0.999, 0.1, 0.9, 0.999, 1e-8, 0.25};
  for (int i = 0; i < 7; i++)
    c[i] = rf_const_scalar(g, NULL, RF_FLOAT64, vals[i]);
  rf_output grad = rf_placeholder(g, "grad", RF_FLOAT64, shape);
  rf_node *up = rf_apply_adamw(g, "adamw", x.var, m.var, v.var, c[0], c[1],
                               c[2], c[3], c[4], c[5], c[6], grad);
  rf_session *s = new_session(g);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, shape, -1, 1);
  rf_tensor *zeros = rf_test_random_tensor(&rng, RF_FLOAT64, shape, 0, 0);
  double *rx = rf_test_to_doubles(xv);
  init_variable(s, &x, xv);
  init_variable(s, &m, zeros);
  init_variable(s, &v, zeros);
  rf_feed feed = {grad, zeros};
  assert_ok(rf_session_run(s, &feed, 1, NULL, 0, &up, 1, NULL));
  for (int i = 0; i < 5; i++) rx[i] *= 1 - 0.1 * 0.25;
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &x.read, 1, NULL, 0, &out));
  assert_tensor_near(out, shape, rx, 1e-15);
  rf_tensor_release(out);
  free(rx);
  rf_tensor_release(xv);
  rf_tensor_release(zeros);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Build-time errors: each leaves no node and the graph's first error. */
static void test_build_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_variable(g, "x", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output acc = rf_variable(g, "acc", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output m = rf_variable(g, "m", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output one = rf_const_scalar(g, "one", RF_FLOAT32, 0.5);
  rf_output vec = rf_placeholder(g, "vec", RF_FLOAT32, rf_shape_of(1, 2));
  rf_output grad = rf_placeholder(g, "grad", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output g64 = rf_placeholder(g, "g64", RF_FLOAT64, rf_shape_of(2, 2, 3));
  rf_output g3 = rf_placeholder(g, "g3", RF_FLOAT32, rf_shape_of(1, 3));

  assert_null(rf_apply_momentum(g, "a", x, acc, vec, grad, one, false));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "input 2 must be a scalar, got shape (2)");
  rf_graph_clear_status(g);
  assert_null(rf_apply_momentum(g, "b", x, acc, one, grad, vec, true));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "input 4 must be a scalar, got shape (2)");
  rf_graph_clear_status(g);
  assert_null(rf_apply_momentum(g, "c", x, acc, one, g64, one, false));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'c' (ApplyMomentum): grad is float64 but variable 'x' "
                "is float32");
  rf_graph_clear_status(g);
  assert_null(rf_apply_momentum(g, "d", x, acc, one, g3, one, false));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'd' (ApplyMomentum): grad has shape (3) but variable 'x' "
                "has shape "
                "(2, 3)");
  rf_graph_clear_status(g);
  rf_output value = rf_read_variable(g, "xr", x);
  assert_null(rf_apply_momentum(g, "e", value, acc, one, grad, one, false));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "not a resource");
  rf_graph_clear_status(g);

  assert_null(
      rf_apply_adamw(g, "f", x, m, v, one, one, one, one, one, one, vec, grad));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "input 9 must be a scalar, got shape (2)");
  rf_graph_clear_status(g);
  assert_null(
      rf_apply_adamw(g, "h", x, m, v, one, one, one, one, one, one, one, g3));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'h' (ApplyAdamW): grad has shape (3) but variable 'x' "
                "has shape "
                "(2, 3)");
  rf_graph_clear_status(g);

  /* Integer variables have no such update: T is a float dtype. */
  rf_output xi = rf_variable(g, "xi", RF_INT32, rf_shape_of(1, 3));
  rf_output ai = rf_variable(g, "ai", RF_INT32, rf_shape_of(1, 3));
  rf_output ci = rf_const_scalar(g, "ci", RF_INT32, 1);
  rf_output gi = rf_placeholder(g, "gi", RF_INT32, rf_shape_of(1, 3));
  assert_null(rf_apply_momentum(g, "i", xi, ai, ci, gi, ci, false));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "int32");
  rf_graph_clear_status(g);
  rf_graph_free(g);
}

/* Run-time errors: one variable twice, an uninitialised slot and a grad
 * whose shape was unknown at build time; none changes any variable. */
static void test_run_errors(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(2, 2, 3);
  rf_graph *g = rf_graph_new();
  var_graph x = add_variable(g, "x", RF_FLOAT32, shape);
  var_graph m = add_variable(g, "m", RF_FLOAT32, shape);
  rf_output never = rf_variable(g, "never", RF_FLOAT32, shape);
  rf_output one = rf_const_scalar(g, "one", RF_FLOAT32, 0.5);
  rf_output grad = rf_placeholder(g, "grad", RF_FLOAT32, rf_shape_unknown());
  rf_node *twice =
      rf_apply_momentum(g, "twice", x.var, x.var, one, grad, one, false);
  rf_node *twice_w = rf_apply_adamw(g, "twice_w", x.var, m.var, x.var, one, one,
                                    one, one, one, one, one, grad);
  rf_node *uninit =
      rf_apply_momentum(g, "uninit", x.var, never, one, grad, one, false);
  rf_node *ok = rf_apply_momentum(g, "ok", x.var, m.var, one, grad, one, false);
  rf_session *s = new_session(g);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -1, 1);
  rf_tensor *mv = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -1, 1);
  init_variable(s, &x, xv);
  init_variable(s, &m, mv);
  rf_tensor *gv = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -1, 1);
  rf_tensor *bad =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 6), -1, 1);
  rf_feed feed = {grad, gv};
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &twice, 1, NULL),
                RF_INVALID_ARGUMENT,
                "var and accum must be two different variables");
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &twice_w, 1, NULL),
                RF_INVALID_ARGUMENT,
                "var, m and v must be three different variables");
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &uninit, 1, NULL),
                RF_FAILED_PRECONDITION,
                "variable 'never' on cpu:0 is not initialized");
  feed.value = bad;
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &ok, 1, NULL),
                RF_INVALID_ARGUMENT,
                "variable 'x' has shape (2, 3) but grad has shape (6)");
  double *wx = rf_test_to_doubles(xv), *wm = rf_test_to_doubles(mv);
  double *refs[2] = {wx, wm};
  rf_output reads[2] = {x.read, m.read};
  assert_state(s, reads, refs, 2, shape, RF_FLOAT32);
  free(wx);
  free(wm);
  rf_tensor_release(xv);
  rf_tensor_release(mv);
  rf_tensor_release(gv);
  rf_tensor_release(bad);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_momentum),
      cmocka_unit_test(test_momentum_nesterov),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_adamw_decay_only),
      cmocka_unit_test(test_build_errors),
      cmocka_unit_test(test_run_errors),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
