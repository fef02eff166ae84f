/* tests/test_gradient_values.c - every differentiable op's gradient, as built
 * by rf_gradients and run in a session, against central finite differences in
 * float64: y = sum(f(x) * r) for a fixed random r, and each element of dy/dx
 * against (y(x + h e_i) - y(x - h e_i)) / 2h. Ends with a 2-layer MLP loss on
 * one device and split over 4 virtual CPU devices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_X 4

typedef struct fd_case fd_case;
/* Builds f from the placeholders x[0..nx-1] (float64); f must be float64. */
typedef rf_output (*build_fn)(rf_graph *g, const rf_output *x,
                              const fd_case *c);

struct fd_case {
  const char *name;
  build_fn build;
  int nx;
  rf_shape shapes[MAX_X];
  double lo[MAX_X], hi[MAX_X]; /* x ranges; both 0: [-1, 1) */
  double min_abs;              /* keep |x| >= min_abs (away from kinks) */
  double h, tol;               /* 0: 1e-6 each */
  /* op parameters */
  int op;
  int64_t axes[RF_MAX_RANK];
  int naxes;
  bool keep_dims, ta, tb;
  rf_dtype dtype;
  int rank;
  int64_t dims[RF_MAX_RANK];
  int64_t labels[8];
  bool spread;    /* MLP: one device scope per layer */
  bool unknown;   /* placeholders of unknown shape: shapes only known at run
                     time, so gradients take their dynamic-shape paths */
  build_fn inner; /* second order: f = d sum(inner(x) * r1) / dx[wrt] */
  int wrt;
};

static rf_tensor *random_x(uint64_t *rng, const fd_case *c, int j) {
  double lo = c->lo[j], hi = c->hi[j];
  if (lo == 0 && hi == 0) lo = -1, hi = 1;
  rf_tensor *t = rf_test_random_tensor(rng, RF_FLOAT64, c->shapes[j], lo, hi);
  double *d = rf_tensor_mutable_data(t);
  for (int64_t i = 0; i < rf_tensor_num_elements(t); i++)
    if (fabs(d[i]) < c->min_abs) d[i] += d[i] < 0 ? -c->min_abs : c->min_abs;
  return t;
}

/* f's shape: static when known, else by running it once. */
static rf_shape shape_of(rf_graph *g, rf_output f, const rf_feed *feeds,
                         int nx) {
  rf_shape s = rf_output_shape(f);
  if (rf_shape_is_fully_defined(&s)) return s;
  rf_tensor *v = NULL;
  rf_test_run(g, 1, feeds, nx, &f, 1, &v);
  s = rf_tensor_shape(v);
  rf_tensor_release(v);
  return s;
}

static double run_y(rf_session *s, rf_feed *feeds, int nx, rf_output y) {
  rf_tensor *v = NULL;
  assert_ok(rf_session_run(s, feeds, nx, &y, 1, NULL, 0, &v));
  double r = rf_tensor_get(v, 0);
  rf_tensor_release(v);
  return r;
}

/* Central difference of y in element i of feeds[j]. */
static double numeric(rf_session *s, rf_feed *feeds, int nx, rf_output y, int j,
                      int64_t i, double h) {
  rf_tensor *orig = feeds[j].value;
  rf_shape shape = rf_tensor_shape(orig);
  double ys[2];
  for (int side = 0; side < 2; side++) {
    rf_tensor *p = NULL;
    assert_ok(rf_tensor_new_copy(RF_FLOAT64, &shape, rf_tensor_data(orig), &p));
    double *d = rf_tensor_mutable_data(p);
    d[i] += side == 0 ? h : -h;
    feeds[j].value = p;
    ys[side] = run_y(s, feeds, nx, y);
    rf_tensor_release(p);
  }
  feeds[j].value = orig;
  return (ys[0] - ys[1]) / (2 * h);
}

/* Checks every element of d sum(f(x) * r) / dx_j against finite differences
 * on `devices` CPU devices. If grads != NULL, grads[j] receives the analytic
 * gradient values (malloc'ed). */
static void check_fd(const fd_case *c, uint64_t *rng, int devices,
                     double **grads) {
  rf_graph *g = rf_graph_new();
  rf_output x[MAX_X], dx[MAX_X];
  rf_feed feeds[MAX_X];
  for (int j = 0; j < c->nx; j++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", j);
    x[j] = rf_placeholder(g, name, RF_FLOAT64,
                          c->unknown ? rf_shape_unknown() : c->shapes[j]);
    feeds[j] = (rf_feed){x[j], random_x(rng, c, j)};
  }
  rf_output f = c->build(g, x, c);
  assert_graph_ok(g);
  assert_int_equal(rf_output_dtype(f), RF_FLOAT64);
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64,
                                       shape_of(g, f, feeds, c->nx), -1, 1);
  rf_output fr = rf_mul(g, "fr", f, rf_const(g, "r", r));
  rf_tensor_release(r);
  rf_output y = rf_sum(g, "y", fr, NULL, -1, false);
  assert_graph_ok(g);
  assert_ok(rf_gradients(g, &y, 1, x, c->nx, NULL, dx));
  assert_graph_ok(g);

  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = devices;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  /* An invalid dx means zero: allowed only for second-order cases, where a
   * first derivative may not depend on every x. */
  rf_output fetch[MAX_X];
  rf_tensor *got[MAX_X] = {NULL};
  int slot[MAX_X], nfetch = 0;
  for (int j = 0; j < c->nx; j++) {
    if (!dx[j].node && !c->inner)
      fail_msg("%s: no gradient for x%d", c->name, j);
    slot[j] = dx[j].node ? nfetch : -1;
    if (dx[j].node) fetch[nfetch++] = dx[j];
  }
  if (nfetch)
    assert_ok(rf_session_run(s, feeds, c->nx, fetch, nfetch, NULL, 0, got));
  double h = c->h ? c->h : 1e-6, tol = c->tol ? c->tol : 1e-6;
  for (int j = 0; j < c->nx; j++) {
    rf_tensor *t = slot[j] >= 0 ? got[slot[j]] : NULL;
    rf_shape gs = t ? rf_tensor_shape(t) : c->shapes[j];
    if (!rf_shape_equal(&gs, &c->shapes[j]))
      fail_msg("%s: gradient of x%d has the wrong shape", c->name, j);
    int64_t n = rf_shape_num_elements(&c->shapes[j]);
    for (int64_t i = 0; i < n; i++) {
      double want = numeric(s, feeds, c->nx, y, j, i, h);
      double have = t ? rf_tensor_get(t, i) : 0;
      if (!(fabs(have - want) <= tol * fmax(1.0, fabs(want))))
        fail_msg(
            "%s: d y / d x%d[%lld]: finite difference %.12g, gradient "
            "%.12g",
            c->name, j, (long long)i, want, have);
    }
    if (grads) grads[j] = t ? rf_test_to_doubles(t) : calloc((size_t)n, 8);
    rf_tensor_release(t);
  }
  for (int j = 0; j < c->nx; j++) rf_tensor_release(feeds[j].value);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Each case with static shapes, then (first order only) with placeholders
 * of unknown shape. */
static void check_all(const fd_case *cases, size_t n) {
  uint64_t rng = rf_test_seed();
  for (size_t i = 0; i < n; i++) {
    check_fd(&cases[i], &rng, 1, NULL);
    if (cases[i].inner) continue;
    fd_case c = cases[i];
    char name[96];
    snprintf(name, sizeof name, "%s/unknown shapes", c.name);
    c.name = name;
    c.unknown = true;
    check_fd(&c, &rng, 1, NULL);
  }
}

/* ---- arithmetic ---- */

enum { ADD, SUB, MUL, DIV, NEG, IDENTITY, RELU, SIGMOID, TANH, SOFTMAX };

static rf_output build_binary(rf_graph *g, const rf_output *x,
                              const fd_case *c) {
  switch (c->op) {
    case ADD: return rf_add(g, NULL, x[0], x[1]);
    case SUB: return rf_sub(g, NULL, x[0], x[1]);
    case MUL: return rf_mul(g, NULL, x[0], x[1]);
    default: return rf_div(g, NULL, x[0], x[1]);
  }
}

static rf_output build_unary(rf_graph *g, const rf_output *x,
                             const fd_case *c) {
  switch (c->op) {
    case NEG: return rf_neg(g, NULL, x[0]);
    case IDENTITY: return rf_identity(g, NULL, x[0]);
    case RELU: return rf_relu(g, NULL, x[0]);
    case SIGMOID: return rf_sigmoid(g, NULL, x[0]);
    case TANH: return rf_tanh(g, NULL, x[0]);
    default: return rf_softmax(g, NULL, x[0]);
  }
}

/* Four binary ops times these shape pairs (numpy broadcasting). */
static const struct {
  const char *name;
  rf_shape a, b;
} binary_shapes[] = {
    {"same", {2, {2, 3}}, {2, {2, 3}}},
    {"row", {2, {2, 3}}, {1, {3}}},
    {"row_first", {1, {3}}, {2, {2, 3}}},
    {"column", {2, {2, 3}}, {2, {2, 1}}},
    {"both", {3, {2, 1, 3}}, {2, {4, 1}}},
    {"scalar", {2, {2, 3}}, {0, {0}}},
    {"scalar_first", {0, {0}}, {2, {2, 3}}},
    {"ones", {3, {1, 1, 1}}, {2, {2, 3}}},
};

static void test_arithmetic(void **state) {
  (void)state;
  static const char *names[] = {"Add", "Sub", "Mul", "Div"};
  uint64_t rng = rf_test_seed();
  for (int op = ADD; op <= DIV; op++) {
    for (size_t k = 0; k < sizeof binary_shapes / sizeof binary_shapes[0];
         k++) {
      char name[64];
      for (int unknown = 0; unknown < 2; unknown++) {
        snprintf(name, sizeof name, "%s/%s%s", names[op], binary_shapes[k].name,
                 unknown ? "/unknown shapes" : "");
        fd_case c = {.name = name,
                     .build = build_binary,
                     .nx = 2,
                     .shapes = {binary_shapes[k].a, binary_shapes[k].b},
                     .op = op,
                     .unknown = unknown};
        if (op == DIV) c.lo[1] = 0.5, c.hi[1] = 2; /* keep away from 0 */
        check_fd(&c, &rng, 1, NULL);
      }
    }
  }
}

static void test_unary(void **state) {
  (void)state;
  static const fd_case cases[] = {
      {.name = "Neg",
       .build = build_unary,
       .nx = 1,
       .shapes = {{2, {2, 3}}},
       .op = NEG},
      {.name = "Identity",
       .build = build_unary,
       .nx = 1,
       .shapes = {{2, {2, 3}}},
       .op = IDENTITY},
      {.name = "Relu",
       .build = build_unary,
       .nx = 1,
       .shapes = {{2, {3, 4}}},
       .op = RELU,
       .min_abs = 0.05},
      {.name = "Sigmoid",
       .build = build_unary,
       .nx = 1,
       .shapes = {{2, {3, 4}}},
       .lo = {-4},
       .hi = {4},
       .op = SIGMOID},
      {.name = "Tanh",
       .build = build_unary,
       .nx = 1,
       .shapes = {{2, {3, 4}}},
       .lo = {-3},
       .hi = {3},
       .op = TANH},
      {.name = "Softmax/2d",
       .build = build_unary,
       .nx = 1,
       .shapes = {{2, {3, 4}}},
       .lo = {-3},
       .hi = {3},
       .op = SOFTMAX},
      {.name = "Softmax/3d",
       .build = build_unary,
       .nx = 1,
       .shapes = {{3, {2, 2, 3}}},
       .lo = {-3},
       .hi = {3},
       .op = SOFTMAX},
      {.name = "Neg/scalar",
       .build = build_unary,
       .nx = 1,
       .shapes = {{0, {0}}},
       .op = NEG},
  };
  check_all(cases, sizeof cases / sizeof cases[0]);
}

static rf_output build_add_n(rf_graph *g, const rf_output *x,
                             const fd_case *c) {
  if (c->nx == 1) return rf_add_n(g, NULL, x, 1);
  rf_output in[4] = {x[0], x[1], x[0], x[2]}; /* x0 twice */
  return rf_add_n(g, NULL, in, 4);
}

static rf_output build_matmul(rf_graph *g, const rf_output *x,
                              const fd_case *c) {
  return rf_matmul(g, NULL, x[0], x[1], c->ta, c->tb);
}

/* Cast to c->dtype and back to float64 (one Cast when it is float64). */
static rf_output build_cast(rf_graph *g, const rf_output *x, const fd_case *c) {
  rf_output t = rf_cast(g, NULL, x[0], c->dtype);
  return c->dtype == RF_FLOAT64 ? t : rf_cast(g, NULL, t, RF_FLOAT64);
}

static void test_add_n_matmul_cast(void **state) {
  (void)state;
  static const fd_case cases[] = {
      {.name = "AddN/one",
       .build = build_add_n,
       .nx = 1,
       .shapes = {{2, {2, 3}}}},
      {.name = "AddN/repeated",
       .build = build_add_n,
       .nx = 3,
       .shapes = {{2, {2, 3}}, {2, {2, 3}}, {2, {2, 3}}}},
      {.name = "MatMul",
       .build = build_matmul,
       .nx = 2,
       .shapes = {{2, {2, 3}}, {2, {3, 4}}}},
      {.name = "MatMul/ta",
       .build = build_matmul,
       .nx = 2,
       .shapes = {{2, {3, 2}}, {2, {3, 4}}},
       .ta = true},
      {.name = "MatMul/tb",
       .build = build_matmul,
       .nx = 2,
       .shapes = {{2, {2, 3}}, {2, {4, 3}}},
       .tb = true},
      {.name = "MatMul/ta_tb",
       .build = build_matmul,
       .nx = 2,
       .shapes = {{2, {3, 2}}, {2, {4, 3}}},
       .ta = true,
       .tb = true},
      {.name = "Cast/float64",
       .build = build_cast,
       .nx = 1,
       .shapes = {{2, {2, 3}}},
       .dtype = RF_FLOAT64},
      /* float32 rounding: a wide step; the function is linear so the only
       * error is rounding, 2 * 6e-8 / 2e-2. */
      {.name = "Cast/float32",
       .build = build_cast,
       .nx = 1,
       .shapes = {{2, {2, 3}}},
       .dtype = RF_FLOAT32,
       .h = 1e-2,
       .tol = 1e-5},
  };
  check_all(cases, sizeof cases / sizeof cases[0]);
}

/* ---- neural network ---- */

static rf_output build_bias_add(rf_graph *g, const rf_output *x,
                                const fd_case *c) {
  return rf_bias_add(g, NULL, x[0], x[1]);
}

static rf_output build_xent(rf_graph *g, const rf_output *x, const fd_case *c) {
  int64_t b = c->shapes[0].dims[0];
  rf_shape ls = rf_shape_of(1, b);
  rf_tensor *labels = NULL;
  assert_ok(rf_tensor_new(c->dtype, &ls, NULL, &labels));
  for (int64_t i = 0; i < b; i++)
    rf_tensor_set(labels, i, (double)c->labels[i]);
  rf_output l = rf_const(g, "labels", labels);
  rf_tensor_release(labels);
  return rf_sparse_softmax_cross_entropy(g, NULL, x[0], l);
}

static void test_nn(void **state) {
  (void)state;
  static const fd_case cases[] = {
      {.name = "BiasAdd/2d",
       .build = build_bias_add,
       .nx = 2,
       .shapes = {{2, {3, 4}}, {1, {4}}}},
      {.name = "BiasAdd/3d",
       .build = build_bias_add,
       .nx = 2,
       .shapes = {{3, {2, 2, 3}}, {1, {3}}}},
      /* NHWC activations with size-1 dims, one channel, and a vector */
      {.name = "BiasAdd/NHWC size-1 dims",
       .build = build_bias_add,
       .nx = 2,
       .shapes = {{4, {2, 1, 3, 2}}, {1, {2}}}},
      {.name = "BiasAdd/one channel",
       .build = build_bias_add,
       .nx = 2,
       .shapes = {{4, {1, 2, 2, 1}}, {1, {1}}}},
      {.name = "BiasAdd/rank 1",
       .build = build_bias_add,
       .nx = 2,
       .shapes = {{1, {3}}, {1, {3}}}},
      {.name = "BiasAdd/NHWC unknown shapes",
       .build = build_bias_add,
       .nx = 2,
       .unknown = true,
       .shapes = {{4, {2, 3, 1, 3}}, {1, {3}}}},
      {.name = "SparseSoftmaxCrossEntropy/int32",
       .build = build_xent,
       .nx = 1,
       .shapes = {{2, {4, 3}}},
       .lo = {-3},
       .hi = {3},
       .dtype = RF_INT32,
       .labels = {0, 2, 1, 2}},
      {.name = "SparseSoftmaxCrossEntropy/int64",
       .build = build_xent,
       .nx = 1,
       .shapes = {{2, {3, 5}}},
       .lo = {-3},
       .hi = {3},
       .dtype = RF_INT64,
       .labels = {4, 0, 3}},
  };
  check_all(cases, sizeof cases / sizeof cases[0]);
}

/* ---- reductions and shapes ---- */

static rf_output build_reduce(rf_graph *g, const rf_output *x,
                              const fd_case *c) {
  return c->op == 0 ? rf_sum(g, NULL, x[0], c->axes, c->naxes, c->keep_dims)
                    : rf_mean(g, NULL, x[0], c->axes, c->naxes, c->keep_dims);
}

static void test_reductions(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int naxes;
    int64_t axes[3];
  } sets[] = {
      {"all", -1, {0}},   {"none", 0, {0}},     {"0", 1, {0}},
      {"1", 1, {1}},      {"2", 1, {2}},        {"-1", 1, {-1}},
      {"0,2", 2, {0, 2}}, {"1,-3", 2, {1, -3}}, {"0,1,2", 3, {0, 1, 2}},
  };
  uint64_t rng = rf_test_seed();
  for (int op = 0; op < 2; op++)
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++)
      for (int keep = 0; keep < 4; keep++) {
        char name[80];
        snprintf(name, sizeof name, "%s/axes=%s/keep_dims=%d%s",
                 op ? "Mean" : "Sum", sets[k].name, keep & 1,
                 keep & 2 ? "/unknown shape" : "");
        fd_case c = {.name = name,
                     .build = build_reduce,
                     .nx = 1,
                     .shapes = {{3, {2, 3, 2}}},
                     .op = op,
                     .naxes = sets[k].naxes,
                     .keep_dims = keep & 1,
                     .unknown = keep & 2};
        memcpy(c.axes, sets[k].axes, sizeof sets[k].axes);
        check_fd(&c, &rng, 1, NULL);
      }
}

static rf_output build_reshape(rf_graph *g, const rf_output *x,
                               const fd_case *c) {
  return rf_reshape_to(g, NULL, x[0], c->rank, c->dims);
}

/* Fill(dims, x0) with x0 a scalar: its gradient is the sum of dy. */
static rf_output build_fill(rf_graph *g, const rf_output *x, const fd_case *c) {
  rf_shape ds = rf_shape_of(1, c->rank);
  rf_tensor *dims = NULL;
  assert_ok(rf_tensor_new_copy(RF_INT64, &ds, c->dims, &dims));
  rf_output f = rf_fill(g, NULL, rf_const(g, NULL, dims), x[0]);
  rf_tensor_release(dims);
  return f;
}

static void test_reshape(void **state) {
  (void)state;
  static const fd_case cases[] = {
      {.name = "Reshape/flatten",
       .build = build_reshape,
       .nx = 1,
       .shapes = {{3, {2, 3, 2}}},
       .rank = 1,
       .dims = {-1}},
      {.name = "Reshape/merge",
       .build = build_reshape,
       .nx = 1,
       .shapes = {{3, {2, 3, 2}}},
       .rank = 2,
       .dims = {6, 2}},
      {.name = "Reshape/split",
       .build = build_reshape,
       .nx = 1,
       .shapes = {{2, {4, 3}}},
       .rank = 3,
       .dims = {2, -1, 3}},
      {.name = "Reshape/scalar",
       .build = build_reshape,
       .nx = 1,
       .shapes = {{2, {1, 1}}},
       .rank = 0},
      {.name = "Fill/value",
       .build = build_fill,
       .nx = 1,
       .shapes = {{0, {0}}},
       .rank = 2,
       .dims = {2, 3}},
  };
  check_all(cases, sizeof cases / sizeof cases[0]);
}

/* ---- second order ---- */

/* f = d sum(inner(x) * r1) / dx[wrt], r1 fixed: the gradients of gradient
 * ops. */
static rf_output build_second(rf_graph *g, const rf_output *x,
                              const fd_case *c) {
  rf_output f = c->inner(g, x, c);
  uint64_t rng = 777;
  rf_tensor *r1 =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_output_shape(f), -1, 1);
  rf_output fr = rf_mul(g, NULL, f, rf_const(g, NULL, r1));
  rf_tensor_release(r1);
  rf_output y = rf_sum(g, NULL, fr, NULL, -1, false);
  rf_output dx[MAX_X];
  assert_ok(rf_gradients(g, &y, 1, x, c->nx, NULL, dx));
  return dx[c->wrt];
}

/* unary(x) * x: the first derivative feeds x into both inputs of the unary
 * op's gradient op, so the second one goes through both of its gradients. */
static rf_output build_unary_times_x(rf_graph *g, const rf_output *x,
                                     const fd_case *c) {
  return rf_mul(g, NULL, build_unary(g, x, c), x[0]);
}

/* BiasAdd(x0, x1) * x0: the bias gradient depends on x0. */
static rf_output build_bias_add_times_x(rf_graph *g, const rf_output *x,
                                        const fd_case *c) {
  return rf_mul(g, NULL, rf_bias_add(g, NULL, x[0], x[1]), x[0]);
}

/* loss * loss: dloss depends on x, so the second derivative goes through
 * both inputs of _SparseXentGrad and the backprop output. */
static rf_output build_xent_squared(rf_graph *g, const rf_output *x,
                                    const fd_case *c) {
  rf_output l = build_xent(g, x, c);
  return rf_mul(g, NULL, l, l);
}

static rf_output build_square_reduce(rf_graph *g, const rf_output *x,
                                     const fd_case *c) {
  rf_output sq = rf_mul(g, NULL, x[0], x[0]);
  return c->op == 0 ? rf_sum(g, NULL, sq, c->axes, c->naxes, c->keep_dims)
                    : rf_mean(g, NULL, sq, c->axes, c->naxes, c->keep_dims);
}

static void test_second_order(void **state) {
  (void)state;
  static const fd_case cases[] = {
      {.name = "Mul/row/second order",
       .build = build_second,
       .inner = build_binary,
       .nx = 2,
       .shapes = {{2, {2, 3}}, {1, {3}}},
       .op = MUL},
      {.name = "Mul/square/second order",
       .build = build_second,
       .inner = build_binary,
       .nx = 2,
       .shapes = {{2, {2, 3}}, {2, {2, 1}}},
       .op = MUL},
      {.name = "Div/second order",
       .build = build_second,
       .inner = build_binary,
       .nx = 2,
       .shapes = {{2, {2, 3}}, {1, {3}}},
       .lo = {-1, 0.5},
       .hi = {1, 2},
       .op = DIV},
      {.name = "MatMul/second order",
       .build = build_second,
       .inner = build_matmul,
       .nx = 2,
       .shapes = {{2, {2, 3}}, {2, {3, 2}}}},
      {.name = "Sum(x*x)/second order",
       .build = build_second,
       .inner = build_square_reduce,
       .nx = 1,
       .shapes = {{3, {2, 3, 2}}},
       .naxes = 2,
       .axes = {0, 2}},
      {.name = "Mean(x*x)/second order",
       .build = build_second,
       .inner = build_square_reduce,
       .nx = 1,
       .shapes = {{3, {2, 3, 2}}},
       .op = 1,
       .naxes = 1,
       .axes = {1},
       .keep_dims = true},
      {.name = "Relu*x/second order",
       .build = build_second,
       .inner = build_unary_times_x,
       .nx = 1,
       .shapes = {{2, {3, 4}}},
       .min_abs = 0.05,
       .op = RELU},
      {.name = "Sigmoid*x/second order",
       .build = build_second,
       .inner = build_unary_times_x,
       .nx = 1,
       .shapes = {{2, {3, 4}}},
       .lo = {-3},
       .hi = {3},
       .op = SIGMOID},
      {.name = "Tanh*x/second order",
       .build = build_second,
       .inner = build_unary_times_x,
       .nx = 1,
       .shapes = {{2, {3, 4}}},
       .lo = {-2},
       .hi = {2},
       .op = TANH},
      {.name = "Softmax*x/second order",
       .build = build_second,
       .inner = build_unary_times_x,
       .nx = 1,
       .shapes = {{3, {2, 2, 3}}},
       .lo = {-2},
       .hi = {2},
       .op = SOFTMAX},
      {.name = "BiasAdd*x/second order in the bias",
       .build = build_second,
       .inner = build_bias_add_times_x,
       .wrt = 1,
       .nx = 2,
       .shapes = {{2, {3, 4}}, {1, {4}}}},
      {.name = "SparseSoftmaxCrossEntropy^2/second order",
       .build = build_second,
       .inner = build_xent_squared,
       .nx = 1,
       .shapes = {{2, {4, 3}}},
       .lo = {-2},
       .hi = {2},
       .dtype = RF_INT32,
       .labels = {0, 2, 1, 2}},
  };
  check_all(cases, sizeof cases / sizeof cases[0]);
}

/* ---- a 2-layer MLP ---- */

/* mean(xent(relu(in W1 + b1) W2 + b2, labels)) for x = {W1, b1, W2, b2};
 * spread: layer 1's MatMul on cpu:0, its BiasAdd and Relu on cpu:1, layer 2
 * on cpu:2, the loss on cpu:3. */
enum { BATCH = 4, IN = 5, HIDDEN = 6, CLASSES = 3 };

static void scope(rf_graph *g, const fd_case *c, const char *dev) {
  if (!c->spread) return;
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, dev));
}

static rf_output build_mlp(rf_graph *g, const rf_output *x, const fd_case *c) {
  uint64_t rng = 12345; /* fixed input batch, the same in every graph */
  rf_tensor *in =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, BATCH, IN), -1, 1);
  rf_shape ls = rf_shape_of(1, BATCH);
  rf_tensor *labels = NULL;
  assert_ok(rf_tensor_new(RF_INT32, &ls, NULL, &labels));
  for (int i = 0; i < BATCH; i++) rf_tensor_set(labels, i, (i * 2) % CLASSES);
  assert_ok(rf_graph_push_device(g, ""));
  scope(g, c, "cpu:0");
  rf_output h = rf_matmul(g, "mm1", rf_const(g, "in", in), x[0], false, false);
  scope(g, c, "cpu:1");
  h = rf_relu(g, "relu", rf_bias_add(g, "ba1", h, x[1]));
  scope(g, c, "cpu:2");
  rf_output logits =
      rf_bias_add(g, "ba2", rf_matmul(g, "mm2", h, x[2], false, false), x[3]);
  scope(g, c, "cpu:3");
  rf_output loss = rf_sparse_softmax_cross_entropy(
      g, "xent", logits, rf_const(g, "labels", labels));
  rf_output mean = rf_mean(g, "loss", loss, NULL, -1, false);
  rf_graph_pop_device(g);
  rf_tensor_release(in);
  rf_tensor_release(labels);
  return mean;
}

static const fd_case mlp = {
    .name = "MLP",
    .build = build_mlp,
    .nx = 4,
    .shapes = {{2, {IN, HIDDEN}},
               {1, {HIDDEN}},
               {2, {HIDDEN, CLASSES}},
               {1, {CLASSES}}},
};

static void test_mlp(void **state) {
  (void)state;
  uint64_t rng = rf_test_seed();
  check_fd(&mlp, &rng, 1, NULL);
  fd_case unknown = mlp;
  unknown.name = "MLP/unknown shapes";
  unknown.unknown = true;
  check_fd(&unknown, &rng, 1, NULL);
}

/* The MLP's gradient in W1, differentiated again in every parameter (a
 * gradient penalty): second order through MatMul, BiasAdd, Relu and the
 * cross-entropy. */
static void test_mlp_second_order(void **state) {
  (void)state;
  uint64_t rng = rf_test_seed();
  fd_case c = mlp;
  c.name = "MLP/second order";
  c.build = build_second;
  c.inner = build_mlp;
  c.min_abs = 0.01;
  check_fd(&c, &rng, 1, NULL);
}

/* The same MLP over 4 devices: gradient nodes follow their forward nodes,
 * and the gradients equal the single-device ones. */
static void test_mlp_four_devices(void **state) {
  (void)state;
  uint64_t seed = rf_test_seed(), rng = seed;
  double *one[MAX_X], *four[MAX_X];
  check_fd(&mlp, &rng, 1, one);
  fd_case spread = mlp;
  spread.name = "MLP/4 devices";
  spread.spread = true;
  rng = seed;
  check_fd(&spread, &rng, 4, four);
  for (int j = 0; j < mlp.nx; j++) {
    int64_t n = rf_shape_num_elements(&mlp.shapes[j]);
    for (int64_t i = 0; i < n; i++)
      if (fabs(one[j][i] - four[j][i]) > 1e-12 * fmax(1, fabs(one[j][i])))
        fail_msg("x%d[%lld]: %.17g on one device, %.17g on four", j,
                 (long long)i, one[j][i], four[j][i]);
    free(one[j]);
    free(four[j]);
  }

  /* Where the gradient nodes went: dW1 comes from mm1's gradient (cpu:0). */
  rf_graph *g = rf_graph_new();
  rf_output x[MAX_X], dx[MAX_X];
  for (int j = 0; j < mlp.nx; j++)
    x[j] = rf_placeholder(g, NULL, RF_FLOAT64, mlp.shapes[j]);
  rf_output y = build_mlp(g, x, &spread);
  assert_ok(rf_gradients(g, &y, 1, x, mlp.nx, NULL, dx));
  assert_string_equal(rf_node_device(dx[0].node), "cpu:0");
  assert_string_equal(rf_node_device(dx[1].node), "cpu:1");
  assert_string_equal(rf_node_device(dx[2].node), "cpu:2");
  assert_string_equal(rf_node_device(dx[3].node), "cpu:2");
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_arithmetic),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_add_n_matmul_cast),
      cmocka_unit_test(test_nn),
      cmocka_unit_test(test_mlp_second_order),
      cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_reshape),
      cmocka_unit_test(test_second_order),
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_mlp_four_devices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
