/* tests/test_state_ops.c - Variable, ReadVariable, Assign,
 * ApplyGradientDescent, ApplyAdam through a session: values persist across runs
 * of one session (and not into another), updates match float64 references over
 * several steps, snapshots taken before an update keep their values, and every
 * error path (uninitialised, wrong dtype/shape at build and run time) reports
 * clearly. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const rf_dtype all_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                      RF_FLOAT64, RF_INT8,     RF_UINT8,
                                      RF_INT32,   RF_INT64,    RF_BOOL};
#define NUM_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))
static const rf_dtype float_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                        RF_FLOAT64};

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

static rf_session *new_session(rf_graph *g, int num_devices) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = num_devices;
  rf_session *s = NULL;
  assert_graph_ok(g);
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static rf_tensor *fetch1(rf_session *s, rf_output o) {
  rf_tensor *t = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &o, 1, NULL, 0, &t));
  return t;
}

static void run_target(rf_session *s, const rf_feed *feeds, int nfeeds,
                       rf_node *target) {
  assert_ok(rf_session_run(s, feeds, nfeeds, NULL, 0, &target, 1, NULL));
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

/* Rounds a reference array the way a variable of dtype dt stores it, so
 * 16-bit references do not drift from the stored values over steps. */
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

/* Assigns `value` to v in one run; the caller keeps its reference. */
static void init_variable(rf_session *s, const var_graph *v, rf_tensor *value) {
  rf_feed feed = {v->init, value};
  run_target(s, &feed, 1, v->assign);
}

static void assert_values(const rf_tensor *got, const double *want,
                          rf_shape shape, rf_dtype dt) {
  assert_int_equal(rf_tensor_dtype(got), dt);
  assert_tensor_near(got, shape, want, rf_test_tolerance(dt));
}

static void test_assign_read_every_dtype(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    rf_dtype dt = all_dtypes[d];
    rf_shape shape = rf_shape_of(2, 3, 5);
    rf_graph *g = rf_graph_new();
    var_graph v = add_variable(g, "v", dt, shape);
    assert_int_equal(rf_output_dtype(v.read), dt);
    rf_shape rs = rf_output_shape(v.read);
    assert_true(rf_shape_equal(&rs, &shape));
    rf_session *s = new_session(g, 1);
    for (int round = 0; round < 2; round++) { /* assign twice: replaces */
      rf_tensor *value = rf_test_random_tensor(&rng, dt, shape, 0, 100);
      double *want = rf_test_to_doubles(value);
      init_variable(s, &v, value);
      rf_tensor_release(value);
      for (int run = 0; run < 2; run++) { /* persists across runs */
        rf_tensor *out = fetch1(s, v.read);
        assert_values(out, want, shape, dt);
        rf_tensor_release(out);
      }
      free(want);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* State belongs to the session: a second session starts uninitialised. */
static void test_state_is_per_session(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  var_graph v = add_variable(g, "v", RF_FLOAT32, rf_shape_of(1, 4));
  rf_session *s1 = new_session(g, 1), *s2 = new_session(g, 1);
  rf_tensor *value =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 4), -1, 1);
  init_variable(s1, &v, value);
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s2, NULL, 0, &v.read, 1, NULL, 0, &out),
                RF_FAILED_PRECONDITION,
                "variable 'v' on cpu:0 is not initialized");
  assert_null(out);
  out = fetch1(s1, v.read);
  double *want = rf_test_to_doubles(value);
  assert_values(out, want, rf_shape_of(1, 4), RF_FLOAT32);
  free(want);
  rf_tensor_release(out);
  rf_tensor_release(value);
  rf_session_free(s1);
  rf_session_free(s2);
  rf_graph_free(g);
}

static void test_uninitialized(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  var_graph v = add_variable(g, "weights", RF_FLOAT64, rf_shape_of(1, 3));
  rf_output alpha = rf_const_scalar(g, "alpha", RF_FLOAT64, 0.5);
  rf_output delta = rf_placeholder(g, "delta", RF_FLOAT64, rf_shape_of(1, 3));
  rf_node *apply = rf_apply_gradient_descent(g, "apply", v.var, alpha, delta);
  rf_graph_pop_device(g);
  rf_session *s = new_session(g, 2);
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &v.read, 1, NULL, 0, &out),
                RF_FAILED_PRECONDITION,
                "variable 'weights' on cpu:1 is not initialized");
  assert_null(out);
  rf_tensor *dv =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, 3), -1, 1);
  rf_feed feed = {delta, dv};
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &apply, 1, NULL),
                RF_FAILED_PRECONDITION, "is not initialized");
  rf_tensor_release(dv);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Wrong dtype or shape: caught by the builders when the variable is a direct
 * input, by the kernels otherwise. */
static void test_assign_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output f64 = rf_placeholder(g, "f64", RF_FLOAT64, rf_shape_of(2, 2, 3));
  assert_null(rf_assign(g, "a", v, f64));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "value is float64 but variable 'v' is float32");
  rf_graph_clear_status(g);
  rf_output vec = rf_placeholder(g, "vec", RF_FLOAT32, rf_shape_of(1, 3));
  assert_null(rf_assign(g, "a", v, vec));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "value has shape (3) but variable 'v' has shape (2, 3)");
  rf_graph_clear_status(g);
  assert_null(rf_read_variable(g, "r", vec).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "not a resource");
  rf_graph_clear_status(g);

  /* Run time: a value of unknown shape, and nodes built by hand that bypass
   * the builders' checks. */
  rf_output any = rf_placeholder(g, "any", RF_FLOAT32, rf_shape_unknown());
  rf_node *a1 = rf_assign(g, "a1", v, any);
  rf_node *a2 = NULL, *r2 = NULL;
  rf_node_builder *b = rf_node_builder_new(g, "Assign", "a2");
  rf_node_builder_input(b, v);
  rf_node_builder_input(b, f64);
  assert_ok(rf_node_builder_finish(b, &a2));
  b = rf_node_builder_new(g, "ReadVariable", "r2");
  rf_node_builder_input(b, v);
  rf_node_builder_attr_dtype(b, "dtype", RF_INT32);
  rf_node_builder_attr_shape(b, "shape", rf_shape_unknown());
  assert_ok(rf_node_builder_finish(b, &r2));
  rf_session *s = new_session(g, 1);
  rf_tensor *bad =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 3), -1, 1);
  rf_feed feed = {any, bad};
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &a1, 1, NULL),
                RF_INVALID_ARGUMENT,
                "cannot assign a value of shape (3) to variable 'v' of shape "
                "(2, 3)");
  rf_tensor *d =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 2, 3), -1, 1);
  rf_feed feed2 = {f64, d};
  assert_status(rf_session_run(s, &feed2, 1, NULL, 0, &a2, 1, NULL),
                RF_INVALID_ARGUMENT,
                "cannot assign a float64 value to variable 'v' of dtype "
                "float32");
  rf_output r2o = {r2, 0};
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &r2o, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "variable 'v' is float32, not int32");
  assert_null(out);
  rf_tensor_release(bad);
  rf_tensor_release(d);
  rf_session_free(s);
  rf_graph_free(g);
}

/* A variable of partly unknown shape takes any value that fits it. */
static void test_partial_shape(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output var = rf_variable(g, "v", RF_INT64, rf_shape_of(2, -1, 3));
  rf_output any = rf_placeholder(g, "any", RF_INT64, rf_shape_unknown());
  rf_node *assign = rf_assign(g, "assign", var, any);
  rf_output read = rf_read_variable(g, "read", var);
  rf_shape rs = rf_output_shape(read), want_static = rf_shape_of(2, -1, 3);
  assert_true(rf_shape_equal(&rs, &want_static));
  rf_session *s = new_session(g, 1);
  for (int rows = 0; rows < 3; rows++) {
    rf_tensor *value =
        rf_test_random_tensor(&rng, RF_INT64, rf_shape_of(2, rows, 3), -50, 50);
    rf_feed feed = {any, value};
    run_target(s, &feed, 1, assign);
    rf_tensor *out = fetch1(s, read);
    double *want = rf_test_to_doubles(value);
    assert_values(out, want, rf_shape_of(2, rows, 3), RF_INT64);
    free(want);
    rf_tensor_release(out);
    rf_tensor_release(value);
  }
  rf_tensor *bad =
      rf_test_random_tensor(&rng, RF_INT64, rf_shape_of(2, 2, 4), -50, 50);
  rf_feed feed = {any, bad};
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &assign, 1, NULL),
                RF_INVALID_ARGUMENT,
                "cannot assign a value of shape (2, 4) to variable 'v' of "
                "shape (?, 3)");
  rf_tensor_release(bad);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_apply_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output vi = rf_variable(g, "vi", RF_INT32, rf_shape_of(1, 3));
  rf_output ai = rf_const_scalar(g, "ai", RF_INT32, 1);
  rf_output di = rf_placeholder(g, "di", RF_INT32, rf_shape_of(1, 3));
  assert_null(rf_apply_gradient_descent(g, "gi", vi, ai, di));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_clear_status(g);

  var_graph v = add_variable(g, "v", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output alpha_vec = rf_placeholder(g, "av", RF_FLOAT32, rf_shape_of(1, 2));
  rf_output delta = rf_placeholder(g, "delta", RF_FLOAT32, rf_shape_unknown());
  assert_null(rf_apply_gradient_descent(g, "g1", v.var, alpha_vec, delta));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "input 1 must be a scalar, got shape (2)");
  rf_graph_clear_status(g);

  rf_output alpha = rf_const_scalar(g, "alpha", RF_FLOAT32, 0.1f);
  rf_node *gd = rf_apply_gradient_descent(g, "gd", v.var, alpha, delta);
  rf_output sc[6];
  for (int i = 0; i < 6; i++) sc[i] = rf_const_scalar(g, NULL, RF_FLOAT32, 0.5);
  rf_node *adam = rf_apply_adam(g, "adam", v.var, v.var, v.var, sc[0], sc[1],
                                sc[2], sc[3], sc[4], sc[5], delta);
  rf_session *s = new_session(g, 1);
  rf_tensor *init =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 2, 3), -1, 1);
  init_variable(s, &v, init);
  rf_tensor *bad =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 6), -1, 1);
  rf_feed feed = {delta, bad};
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &gd, 1, NULL),
                RF_INVALID_ARGUMENT,
                "variable 'v' has shape (2, 3) but delta has shape (6)");
  feed.value = init;
  assert_status(rf_session_run(s, &feed, 1, NULL, 0, &adam, 1, NULL),
                RF_INVALID_ARGUMENT, "three different variables");
  /* The failed updates left the value alone. */
  rf_tensor *out = fetch1(s, v.read);
  double *want = rf_test_to_doubles(init);
  assert_values(out, want, rf_shape_of(2, 2, 3), RF_FLOAT32);
  free(want);
  rf_tensor_release(out);
  rf_tensor_release(bad);
  rf_tensor_release(init);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Several GD steps against a float64 reference; in between, a held snapshot
 * forces the copy path and must keep its old value. */
static void test_gradient_descent(void **state) {
  (void)state;
  for (int d = 0; d < 4; d++) {
    rf_dtype dt = float_dtypes[d];
    rf_shape shape = rf_shape_of(2, 123, 97);
    int64_t n = rf_shape_num_elements(&shape);
    rf_graph *g = rf_graph_new();
    var_graph v = add_variable(g, "v", dt, shape);
    rf_output alpha = rf_placeholder(g, "alpha", dt, rf_shape_scalar());
    rf_output delta = rf_placeholder(g, "delta", dt, shape);
    rf_node *apply = rf_apply_gradient_descent(g, "gd", v.var, alpha, delta);
    rf_session *s = new_session(g, 1);
    rf_tensor *init = rf_test_random_tensor(&rng, dt, shape, -2, 2);
    double *ref = rf_test_to_doubles(init);
    init_variable(s, &v, init);
    rf_tensor_release(init);
    rf_tensor *snapshot = NULL;
    double *snap_want = NULL;
    for (int step = 0; step < 5; step++) {
      if (step == 3) { /* hold a snapshot across the next updates */
        snapshot = fetch1(s, v.read);
        snap_want = malloc(sizeof(double) * (size_t)n);
        memcpy(snap_want, ref, sizeof(double) * (size_t)n);
      }
      rf_tensor *a = scalar(dt, rf_test_uniform(&rng, 0.1, 1));
      rf_tensor *dv = rf_test_random_tensor(&rng, dt, shape, -1, 1);
      double av = rf_tensor_get(a, 0);
      for (int64_t i = 0; i < n; i++) ref[i] -= av * rf_tensor_get(dv, i);
      round_to(dt, ref, n);
      rf_feed feeds[2] = {{alpha, a}, {delta, dv}};
      run_target(s, feeds, 2, apply);
      rf_tensor_release(a);
      rf_tensor_release(dv);
    }
    rf_tensor *out = fetch1(s, v.read);
    assert_values(out, ref, shape, dt);
    assert_values(snapshot, snap_want, shape, dt);
    rf_tensor_release(out);
    rf_tensor_release(snapshot);
    free(snap_want);
    free(ref);
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* With nobody else holding the value, an update writes in place: the value's
 * buffer stays where it was. */
static void test_update_in_place(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  var_graph v = add_variable(g, "v", RF_FLOAT32, rf_shape_of(1, 1000));
  rf_output alpha = rf_const_scalar(g, "alpha", RF_FLOAT32, 0.5);
  rf_output delta =
      rf_placeholder(g, "delta", RF_FLOAT32, rf_shape_of(1, 1000));
  rf_node *apply = rf_apply_gradient_descent(g, "gd", v.var, alpha, delta);
  rf_session *s = new_session(g, 1);
  rf_tensor *init =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 1000), -1, 1);
  init_variable(s, &v, init);
  rf_tensor_release(init);
  rf_feed feed = {delta, NULL};
  feed.value =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 1000), -1, 1);
  run_target(s, &feed, 1, apply); /* may copy: the runtime may cache feeds */
  rf_tensor *before = fetch1(s, v.read);
  const void *where = rf_tensor_data(before);
  rf_tensor_release(before);
  run_target(s, &feed, 1, apply);
  rf_tensor *after = fetch1(s, v.read);
  assert_ptr_equal(rf_tensor_data(after), where);
  rf_tensor_release(after);
  rf_tensor_release(feed.value);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Read and update in one run, Read -> Apply ordered by a control edge: the
 * fetched value is the one from before the update. */
static void test_snapshot_in_same_run(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 33);
  rf_graph *g = rf_graph_new();
  var_graph v = add_variable(g, "v", RF_FLOAT32, shape);
  rf_output alpha = rf_const_scalar(g, "alpha", RF_FLOAT32, 1.0);
  rf_output delta = rf_placeholder(g, "delta", RF_FLOAT32, shape);
  rf_output r = rf_read_variable(g, "snapshot", v.var);
  rf_node *apply = rf_apply_gradient_descent(g, "gd", v.var, alpha, delta);
  assert_ok(rf_graph_add_control_edge(g, r.node, apply));
  rf_session *s = new_session(g, 1);
  rf_tensor *init = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -1, 1);
  double *old = rf_test_to_doubles(init);
  init_variable(s, &v, init);
  rf_tensor_release(init);
  rf_tensor *dv = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -1, 1);
  rf_feed feed = {delta, dv};
  rf_tensor *got = NULL;
  assert_ok(rf_session_run(s, &feed, 1, &r, 1, &apply, 1, &got));
  assert_values(got, old, shape, RF_FLOAT32);
  rf_tensor *now = fetch1(s, v.read);
  double *want = malloc(sizeof(double) * 33);
  for (int i = 0; i < 33; i++) want[i] = old[i] - rf_tensor_get(dv, i);
  assert_values(now, want, shape, RF_FLOAT32);
  assert_values(got, old, shape, RF_FLOAT32); /* still the old value */
  free(want);
  free(old);
  rf_tensor_release(got);
  rf_tensor_release(now);
  rf_tensor_release(dv);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Several Adam steps against TensorFlow's formula in float64. beta powers are
 * fed per step as TF's optimizer does. */
static void test_adam(void **state) {
  (void)state;
  for (int d = 0; d < 4; d++) {
    rf_dtype dt = float_dtypes[d];
    /* The reference uses the scalars as stored in dt. */
    const double lr = stored(dt, 0.05), b1 = stored(dt, 0.9);
    const double b2 = stored(dt, 0.999), eps = stored(dt, 1e-4);
    /* Large enough for the update to be split over the thread pool. */
    rf_shape shape = rf_shape_of(2, 37, 211);
    int64_t n = rf_shape_num_elements(&shape);
    rf_graph *g = rf_graph_new();
    var_graph x = add_variable(g, "x", dt, shape);
    var_graph m = add_variable(g, "m", dt, shape);
    var_graph v = add_variable(g, "v", dt, shape);
    rf_output b1p = rf_placeholder(g, "b1p", dt, rf_shape_scalar());
    rf_output b2p = rf_placeholder(g, "b2p", dt, rf_shape_scalar());
    rf_output grad = rf_placeholder(g, "grad", dt, shape);
    rf_node *adam = rf_apply_adam(g, "adam", x.var, m.var, v.var, b1p, b2p,
                                  rf_const_scalar(g, "lr", dt, lr),
                                  rf_const_scalar(g, "b1", dt, b1),
                                  rf_const_scalar(g, "b2", dt, b2),
                                  rf_const_scalar(g, "eps", dt, eps), grad);
    rf_session *s = new_session(g, 1);
    rf_tensor *xv = rf_test_random_tensor(&rng, dt, shape, -1, 1);
    rf_tensor *zeros = rf_test_random_tensor(&rng, dt, shape, 0, 0);
    double *rx = rf_test_to_doubles(xv), *rm = calloc((size_t)n, 8),
           *rv = calloc((size_t)n, 8);
    init_variable(s, &x, xv);
    init_variable(s, &m, zeros);
    init_variable(s, &v, zeros);
    rf_tensor_release(xv);
    rf_tensor_release(zeros);
    double p1 = 1, p2 = 1;
    for (int t = 1; t <= 4; t++) {
      p1 *= b1;
      p2 *= b2;
      /* |grad| in [0.5, 1.5): v stays clear of 16-bit underflow. */
      rf_tensor *gv = rf_test_random_tensor(&rng, dt, shape, 0.5, 1.5);
      for (int64_t i = 0; i < n; i++)
        if (rf_test_rand(&rng) & 1) rf_tensor_set(gv, i, -rf_tensor_get(gv, i));
      rf_tensor *p1v = scalar(dt, p1), *p2v = scalar(dt, p2);
      double q1 = rf_tensor_get(p1v, 0), q2 = rf_tensor_get(p2v, 0);
      double lr_t = lr * sqrt(1 - q2) / (1 - q1);
      for (int64_t i = 0; i < n; i++) {
        double gi = rf_tensor_get(gv, i);
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        rx[i] -= lr_t * rm[i] / (sqrt(rv[i]) + eps);
      }
      round_to(dt, rx, n);
      round_to(dt, rm, n);
      round_to(dt, rv, n);
      rf_feed feeds[3] = {{b1p, p1v}, {b2p, p2v}, {grad, gv}};
      run_target(s, feeds, 3, adam);
      rf_tensor_release(gv);
      rf_tensor_release(p1v);
      rf_tensor_release(p2v);
    }
    rf_output reads[3] = {x.read, m.read, v.read};
    double *refs[3] = {rx, rm, rv};
    rf_tensor *outs[3];
    assert_ok(rf_session_run(s, NULL, 0, reads, 3, NULL, 0, outs));
    for (int k = 0; k < 3; k++) {
      assert_values(outs[k], refs[k], shape, dt);
      rf_tensor_release(outs[k]);
      free(refs[k]);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* Adam treats denormal floats as zero (kernels/cpu/denormal.h): a moment
 * that would decay into the denormal range becomes 0, a denormal gradient
 * counts as 0; normal values follow TensorFlow's formula. CTest runs it
 * again with RF_FLUSH_DENORMALS=0, where the denormals stay. */
static void test_adam_flushes_denormals(void **state) {
  (void)state;
#if defined(__x86_64__) || defined(__i386__)
  rf_shape shape = rf_shape_of(1, 3);
  rf_graph *g = rf_graph_new();
  var_graph x = add_variable(g, "x", RF_FLOAT32, shape);
  var_graph m = add_variable(g, "m", RF_FLOAT32, shape);
  var_graph v = add_variable(g, "v", RF_FLOAT32, shape);
  rf_output grad = rf_placeholder(g, "grad", RF_FLOAT32, shape);
  rf_output one = rf_const_scalar(g, "one", RF_FLOAT32, 0.5);
  rf_node *adam =
      rf_apply_adam(g, "adam", x.var, m.var, v.var, one, one,
                    rf_const_scalar(g, "lr", RF_FLOAT32, 0.1),
                    rf_const_scalar(g, "b1", RF_FLOAT32, 0.9),
                    rf_const_scalar(g, "b2", RF_FLOAT32, 0.999),
                    rf_const_scalar(g, "eps", RF_FLOAT32, 1e-7), grad);
  rf_session *s = new_session(g, 1);
  const float xv[3] = {1, 1, 1}, mv[3] = {1e-39f, 0, 0}, zv[3] = {0, 0, 0};
  const float gv[3] = {0, 1e-40f, 1};
  rf_tensor *t[4];
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &shape, xv, &t[0]));
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &shape, mv, &t[1]));
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &shape, zv, &t[2]));
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &shape, gv, &t[3]));
  init_variable(s, &x, t[0]);
  init_variable(s, &m, t[1]);
  init_variable(s, &v, t[2]);
  rf_feed feed = {grad, t[3]};
  run_target(s, &feed, 1, adam);
  rf_output reads[2] = {m.read, v.read};
  rf_tensor *outs[2];
  assert_ok(rf_session_run(s, NULL, 0, reads, 2, NULL, 0, outs));
  const float *mo = rf_tensor_data(outs[0]), *vo = rf_tensor_data(outs[1]);
  const char *mode = getenv("RF_FLUSH_DENORMALS");
  if (mode && strcmp(mode, "0") == 0) { /* IEEE denormals kept */
    assert_true(mo[0] == 0.9f * 1e-39f && mo[0] != 0.0f);
    assert_true(mo[1] != 0.0f);
  } else {
    assert_true(mo[0] == 0.0f); /* 0.9 * 1e-39: denormal, flushed */
    assert_true(mo[1] == 0.0f && vo[1] == 0.0f); /* the denormal gradient */
  }
  assert_true(fabs(mo[2] - 0.1) < 1e-6 && fabs(vo[2] - 0.001) < 1e-6);
  for (int k = 0; k < 2; k++) rf_tensor_release(outs[k]);
  for (int k = 0; k < 4; k++) rf_tensor_release(t[k]);
  rf_session_free(s);
  rf_graph_free(g);
#else
  skip();
#endif
}

/* Updaters and readers on one session at once: every update lands (the
 * variable's mutex serialises them) and no reader ever sees a half-written
 * value (all elements move together, so a torn snapshot shows up). */
typedef struct concurrent_ctx {
  rf_session *s;
  rf_output read;
  rf_node *apply;
  int torn;
} concurrent_ctx;

#define UPDATES_PER_THREAD 25

static void *updater(void *arg) {
  concurrent_ctx *c = arg;
  for (int i = 0; i < UPDATES_PER_THREAD; i++)
    if (rf_session_run(c->s, NULL, 0, NULL, 0, &c->apply, 1, NULL))
      abort(); /* cannot happen: the graph is fixed and initialised */
  return NULL;
}

static void *reader(void *arg) {
  concurrent_ctx *c = arg;
  for (int i = 0; i < 2 * UPDATES_PER_THREAD; i++) {
    rf_tensor *t = NULL;
    if (rf_session_run(c->s, NULL, 0, &c->read, 1, NULL, 0, &t)) abort();
    const double *d = rf_tensor_data(t);
    for (int64_t k = 1; k < rf_tensor_num_elements(t); k++)
      if (d[k] != d[0]) c->torn = 1;
    rf_tensor_release(t);
  }
  return NULL;
}

static void test_concurrent_updates(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 4096);
  rf_graph *g = rf_graph_new();
  var_graph v = add_variable(g, "v", RF_FLOAT64, shape);
  rf_output alpha = rf_const_scalar(g, "alpha", RF_FLOAT64, 1.0);
  rf_node *apply = rf_apply_gradient_descent(g, "gd", v.var, alpha,
                                             rf_ones_like(g, "ones", v.read));
  rf_session *s = new_session(g, 1);
  double start = floor(rf_test_uniform(&rng, 100, 1000));
  rf_tensor *init = rf_test_random_tensor(&rng, RF_FLOAT64, shape, 0, 0);
  for (int64_t k = 0; k < 4096; k++) rf_tensor_set(init, k, start);
  init_variable(s, &v, init);
  rf_tensor_release(init);
  concurrent_ctx c = {s, v.read, apply, 0};
  pthread_t th[3];
  assert_int_equal(pthread_create(&th[0], NULL, updater, &c), 0);
  assert_int_equal(pthread_create(&th[1], NULL, updater, &c), 0);
  assert_int_equal(pthread_create(&th[2], NULL, reader, &c), 0);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  assert_false(c.torn);
  rf_tensor *out = fetch1(s, v.read);
  double *want = malloc(sizeof(double) * 4096);
  for (int k = 0; k < 4096; k++) want[k] = start - 2 * UPDATES_PER_THREAD;
  assert_values(out, want, shape, RF_FLOAT64);
  free(want);
  rf_tensor_release(out);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_assign_read_every_dtype),
      cmocka_unit_test(test_state_is_per_session),
      cmocka_unit_test(test_uninitialized),
      cmocka_unit_test(test_assign_errors),
      cmocka_unit_test(test_partial_shape),
      cmocka_unit_test(test_apply_errors),
      cmocka_unit_test(test_gradient_descent),
      cmocka_unit_test(test_update_in_place),
      cmocka_unit_test(test_snapshot_in_same_run),
      cmocka_unit_test(test_adam),
      cmocka_unit_test(test_adam_flushes_denormals),
      cmocka_unit_test(test_concurrent_updates),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
