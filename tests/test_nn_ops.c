/* tests/test_nn_ops.c - BiasAdd, Relu, Sigmoid, Tanh, Softmax,
 * SparseSoftmaxCrossEntropyWithLogits and their gradient ops, run through
 * sessions against float64 references computed here: every dtype each op
 * accepts, empty / one-element / odd sizes, large logits, and every error at
 * build and at run time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel.h"
#include "testutil.h"

static const rf_dtype floats[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                  RF_FLOAT64};
static const rf_dtype relu_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                       RF_FLOAT64, RF_INT8,     RF_INT32,
                                       RF_INT64};

/* A node of an internal op over inputs (T from the first). */
static rf_output internal(rf_graph *g, const char *op, const rf_output *in,
                          int n) {
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(in[0]));
  rf_node *node = NULL;
  assert_ok(rf_node_builder_finish(b, &node));
  rf_output o = {node, 0};
  return o;
}

/* ---- activations ---- */

enum { RELU, SIGMOID, TANH, RELU_GRAD, SIGMOID_GRAD, TANH_GRAD, NUM_ACT };
static const char *const act_ops[NUM_ACT] = {
    "Relu", "Sigmoid", "Tanh", "_ReluGrad", "_SigmoidGrad", "_TanhGrad"};

/* a: the first input, b: the second (gradient ops). */
static double ref_act(int op, double a, double b) {
  switch (op) {
    case RELU: return isnan(a) ? a : (a > 0 ? a : 0);
    case SIGMOID: return 1 / (1 + exp(-a));
    case TANH: return tanh(a);
    case RELU_GRAD: return b > 0 ? a : 0;      /* (dy, x) */
    case SIGMOID_GRAD: return b * a * (1 - a); /* (y, dy) */
    default: return b * (1 - a * a);           /* (y, dy) */
  }
}

static rf_output act_node(rf_graph *g, int op, rf_output a, rf_output b) {
  switch (op) {
    case RELU: return rf_relu(g, NULL, a);
    case SIGMOID: return rf_sigmoid(g, NULL, a);
    case TANH: return rf_tanh(g, NULL, a);
    default: {
      rf_output in[2] = {a, b};
      return internal(g, act_ops[op], in, 2);
    }
  }
}

static void check_activations(uint64_t *rng, rf_dtype dt) {
  static const int64_t sizes[][3] = {
      {1, 1, 0}, {1, 1, 1}, {1, 1, 7}, {3, 5, 67}};
  enum { NS = 4 };
  bool is_int = !rf_dtype_is_float(dt);
  rf_graph *g = rf_graph_new();
  rf_feed feeds[2 * NS];
  rf_output fetch[NUM_ACT * NS];
  int ops[NUM_ACT * NS], shape_of[NUM_ACT * NS], nfetch = 0;
  for (int s = 0; s < NS; s++) {
    rf_shape sh =
        rf_shape_make(s == 3 ? 3 : 1, s == 3 ? sizes[s] : &sizes[s][2]);
    double lo = is_int ? -100 : -6, hi = is_int ? 100 : 6;
    feeds[2 * s] = (rf_feed){rf_placeholder(g, NULL, dt, sh),
                             rf_test_random_tensor(rng, dt, sh, lo, hi)};
    feeds[2 * s + 1] = (rf_feed){rf_placeholder(g, NULL, dt, sh),
                                 rf_test_random_tensor(rng, dt, sh, lo, hi)};
    if (!is_int && s == 2) /* Relu passes NaN through */
      rf_tensor_set(feeds[2 * s].value, 3, NAN);
    for (int op = 0; op < NUM_ACT; op++) {
      if (is_int && op != RELU && op != RELU_GRAD) continue;
      if (!is_int && s == 2 && op != RELU && op != RELU_GRAD)
        continue; /* the NaN input is for Relu */
      ops[nfetch] = op;
      shape_of[nfetch] = s;
      fetch[nfetch++] =
          act_node(g, op, feeds[2 * s].output, feeds[2 * s + 1].output);
    }
  }
  assert_graph_ok(g);
  rf_tensor *outs[NUM_ACT * NS];
  rf_test_run(g, 1, feeds, 2 * NS, fetch, nfetch, outs);
  for (int i = 0; i < nfetch; i++) {
    const rf_tensor *a = feeds[2 * shape_of[i]].value;
    const rf_tensor *b = feeds[2 * shape_of[i] + 1].value;
    int64_t n = rf_tensor_num_elements(a);
    double *want = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t j = 0; j < n; j++)
      want[j] = ref_act(ops[i], rf_tensor_get(a, j), rf_tensor_get(b, j));
    assert_tensor_near(outs[i], rf_tensor_shape(a), want,
                       rf_test_tolerance(dt));
    assert_int_equal(rf_tensor_dtype(outs[i]), dt);
    free(want);
    rf_tensor_release(outs[i]);
  }
  for (int i = 0; i < 2 * NS; i++) rf_tensor_release(feeds[i].value);
  rf_graph_free(g);
}

static void test_activations_every_dtype(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  for (size_t d = 0; d < sizeof relu_dtypes / sizeof relu_dtypes[0]; d++)
    check_activations(&rng, relu_dtypes[d]);
}

/* Nodes of op `op` (0 Relu, 1 Sigmoid, 2 Tanh, 3 Softmax, 4 BiasAdd) on a
 * placeholder of dt; returns the graph's status. */
static rf_status *build_status(int op, rf_dtype dt, rf_shape xs, rf_dtype bdt,
                               rf_shape bs) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", dt, xs);
  rf_output b = rf_placeholder(g, "b", bdt, bs);
  rf_output y;
  switch (op) {
    case 0: y = rf_relu(g, "y", x); break;
    case 1: y = rf_sigmoid(g, "y", x); break;
    case 2: y = rf_tanh(g, "y", x); break;
    case 3: y = rf_softmax(g, "y", x); break;
    case 4: y = rf_bias_add(g, "y", x, b); break;
    default: y = rf_sparse_softmax_cross_entropy(g, "y", x, b); break;
  }
  rf_status *st = rf_graph_status(g);
  if (st) assert_null(y.node);
  rf_graph_free(g);
  return st;
}

static void test_dtypes_outside_the_op_are_rejected(void **state) {
  (void)state;
  rf_shape v = rf_shape_of(1, (int64_t)3);
  assert_status(build_status(0, RF_UINT8, v, RF_FLOAT32, v),
                RF_INVALID_ARGUMENT, "uint8");
  assert_status(build_status(0, RF_BOOL, v, RF_FLOAT32, v), RF_INVALID_ARGUMENT,
                "bool");
  assert_status(build_status(1, RF_INT32, v, RF_FLOAT32, v),
                RF_INVALID_ARGUMENT, "int32");
  assert_status(build_status(2, RF_INT64, v, RF_FLOAT32, v),
                RF_INVALID_ARGUMENT, "int64");
  assert_status(build_status(3, RF_INT8, v, RF_FLOAT32, v), RF_INVALID_ARGUMENT,
                "int8");
  assert_status(build_status(4, RF_INT32, v, RF_INT32, v), RF_INVALID_ARGUMENT,
                "int32");
  rf_shape m = rf_shape_of(2, (int64_t)3, (int64_t)4);
  assert_status(build_status(5, RF_INT32, m, RF_INT32, v), RF_INVALID_ARGUMENT,
                "int32");
  assert_status(build_status(5, RF_FLOAT32, m, RF_FLOAT32, v),
                RF_INVALID_ARGUMENT, "float32");
  assert_status(build_status(5, RF_FLOAT32, m, RF_UINT8, v),
                RF_INVALID_ARGUMENT, "uint8");
}

/* ---- BiasAdd and _BiasAddGrad ---- */

static void test_bias_add_and_grad(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(3);
  static const int64_t shapes[][4] = {{5},           {1, 1}, {4, 7}, {2, 3, 9},
                                      {2, 1, 3, 33}, {0, 5}, {3, 0}};
  static const int ranks[] = {1, 2, 2, 3, 4, 2, 2};
  for (int d = 0; d < 4; d++) {
    rf_dtype dt = floats[d];
    for (int s = 0; s < 7; s++) {
      rf_shape xs = rf_shape_make(ranks[s], shapes[s]);
      int64_t c = shapes[s][ranks[s] - 1];
      rf_shape bs = rf_shape_of(1, c);
      rf_tensor *x = rf_test_random_tensor(&rng, dt, xs, -4, 4);
      rf_tensor *b = rf_test_random_tensor(&rng, dt, bs, -4, 4);
      rf_graph *g = rf_graph_new();
      rf_output xp = rf_placeholder(g, "x", dt, xs);
      rf_output bp = rf_placeholder(g, "b", dt, bs);
      rf_output y[2] = {rf_bias_add(g, "y", xp, bp),
                        internal(g, "_BiasAddGrad", &xp, 1)};
      rf_shape built = rf_output_shape(y[1]);
      assert_true(rf_shape_equal(&built, &bs));
      rf_feed feeds[2] = {{xp, x}, {bp, b}};
      rf_tensor *outs[2];
      rf_test_run(g, 1, feeds, 2, y, 2, outs);
      int64_t n = rf_tensor_num_elements(x);
      double *want = calloc((size_t)n + 1, sizeof(double));
      double *colsum = calloc((size_t)c + 1, sizeof(double));
      for (int64_t i = 0; i < n; i++) {
        want[i] = rf_tensor_get(x, i) + rf_tensor_get(b, i % c);
        colsum[i % c] += rf_tensor_get(x, i);
      }
      assert_tensor_near(outs[0], xs, want, rf_test_tolerance(dt));
      assert_tensor_near(outs[1], bs, colsum, rf_test_tolerance(dt));
      free(want);
      free(colsum);
      rf_tensor_release(outs[0]);
      rf_tensor_release(outs[1]);
      rf_tensor_release(x);
      rf_tensor_release(b);
      rf_graph_free(g);
    }
  }
}

static void test_bias_add_errors(void **state) {
  (void)state;
  rf_shape m = rf_shape_of(2, (int64_t)3, (int64_t)4);
  assert_status(
      build_status(4, RF_FLOAT32, m, RF_FLOAT32, rf_shape_of(1, (int64_t)5)),
      RF_INVALID_ARGUMENT, "does not match the last dimension");
  assert_status(build_status(4, RF_FLOAT32, m, RF_FLOAT32, m),
                RF_INVALID_ARGUMENT, "bias must have rank 1");
  assert_status(build_status(4, RF_FLOAT64, rf_shape_scalar(), RF_FLOAT64,
                             rf_shape_of(1, (int64_t)1)),
                RF_INVALID_ARGUMENT, "value must have rank >= 1");
  assert_status(
      build_status(4, RF_FLOAT32, m, RF_FLOAT64, rf_shape_of(1, (int64_t)4)),
      RF_INVALID_ARGUMENT, NULL);
  /* Shapes known only at run time. */
  uint64_t rng = rf_test_rng(4);
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_unknown());
  rf_output bp = rf_placeholder(g, "b", RF_FLOAT32, rf_shape_unknown());
  rf_output y = rf_bias_add(g, "badd", xp, bp);
  assert_graph_ok(g);
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32, m, 0, 1);
  rf_tensor *b =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, (int64_t)3), 0, 1);
  rf_feed feeds[2] = {{xp, x}, {bp, b}};
  rf_tensor *out = NULL;
  rf_status *st = rf_test_try_run(g, feeds, 2, &y, 1, &out);
  assert_null(out);
  assert_true(strstr(rf_status_message(st), "badd") != NULL);
  assert_status(st, RF_INVALID_ARGUMENT, "does not match the last dimension");
  rf_tensor_release(x);
  rf_tensor_release(b);
  rf_graph_free(g);
}

/* ---- Softmax and _SoftmaxGrad ---- */

/* softmax of each row of c elements (n in all), in float64. */
static double *ref_softmax(const double *x, int64_t n, int64_t c) {
  double *y = calloc((size_t)n + 1, sizeof(double));
  for (int64_t r = 0; c > 0 && r < n / c; r++) {
    const double *xr = x + r * c;
    double m = xr[0], s = 0;
    for (int64_t j = 1; j < c; j++) m = fmax(m, xr[j]);
    for (int64_t j = 0; j < c; j++) s += exp(xr[j] - m);
    for (int64_t j = 0; j < c; j++) y[r * c + j] = exp(xr[j] - m) / s;
  }
  return y;
}

static void test_softmax_and_grad(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(5);
  static const int64_t shapes[][3] = {{1},    {6},    {3, 7},  {2, 3, 33},
                                      {0, 4}, {4, 1}, {2, 300}};
  static const int ranks[] = {1, 1, 2, 3, 2, 2, 2};
  for (int d = 0; d < 4; d++) {
    rf_dtype dt = floats[d];
    for (int s = 0; s < 7; s++) {
      rf_shape xs = rf_shape_make(ranks[s], shapes[s]);
      int64_t c = shapes[s][ranks[s] - 1];
      /* Large logits: exp would overflow without the max shift. */
      double off = s % 2 ? 1000 : -1000;
      rf_tensor *x = rf_test_random_tensor(&rng, dt, xs, off - 5, off + 5);
      rf_tensor *dy = rf_test_random_tensor(&rng, dt, xs, -1, 1);
      rf_tensor *y = rf_test_random_tensor(&rng, dt, xs, 0, 1);
      rf_graph *g = rf_graph_new();
      rf_output xp = rf_placeholder(g, "x", dt, xs);
      rf_output dyp = rf_placeholder(g, "dy", dt, xs);
      rf_output yp = rf_placeholder(g, "y", dt, xs);
      rf_output gin[2] = {dyp, yp};
      rf_output f[2] = {rf_softmax(g, "sm", xp),
                        internal(g, "_SoftmaxGrad", gin, 2)};
      rf_feed feeds[3] = {{xp, x}, {dyp, dy}, {yp, y}};
      rf_tensor *outs[2];
      rf_test_run(g, 1, feeds, 3, f, 2, outs);
      int64_t n = rf_tensor_num_elements(x);
      double *xd = rf_test_to_doubles(x), *dyd = rf_test_to_doubles(dy);
      double *yd = rf_test_to_doubles(y);
      double *want = ref_softmax(xd, n, c);
      assert_tensor_near(outs[0], xs, want, rf_test_tolerance(dt));
      for (int64_t r = 0; c > 0 && r < n / c; r++) {
        double dot = 0;
        for (int64_t j = 0; j < c; j++) dot += dyd[r * c + j] * yd[r * c + j];
        for (int64_t j = 0; j < c; j++)
          want[r * c + j] = (dyd[r * c + j] - dot) * yd[r * c + j];
      }
      assert_tensor_near(outs[1], xs, want, rf_test_tolerance(dt));
      free(want);
      free(xd);
      free(dyd);
      free(yd);
      rf_tensor_release(outs[0]);
      rf_tensor_release(outs[1]);
      rf_tensor_release(x);
      rf_tensor_release(dy);
      rf_tensor_release(y);
      rf_graph_free(g);
    }
  }
}

static void test_softmax_of_a_scalar_fails(void **state) {
  (void)state;
  assert_status(build_status(3, RF_FLOAT32, rf_shape_scalar(), RF_FLOAT32,
                             rf_shape_scalar()),
                RF_INVALID_ARGUMENT, "rank >= 1");
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_unknown());
  rf_output y = rf_softmax(g, "probs", xp);
  assert_graph_ok(g);
  rf_tensor *x;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT64, 2.0, &x));
  rf_feed feed = {xp, x};
  rf_tensor *out = NULL;
  rf_status *st = rf_test_try_run(g, &feed, 1, &y, 1, &out);
  assert_null(out);
  assert_true(strstr(rf_status_message(st), "probs") != NULL);
  assert_status(st, RF_INVALID_ARGUMENT, "rank >= 1");
  rf_tensor_release(x);
  rf_graph_free(g);
}

/* ---- SparseSoftmaxCrossEntropyWithLogits and _SparseXentGrad ---- */

static void check_xent(uint64_t *rng, rf_dtype dt, rf_dtype lt, int64_t b,
                       int64_t c, double off) {
  rf_shape ls = rf_shape_of(2, b, c), bs = rf_shape_of(1, b);
  rf_tensor *x = rf_test_random_tensor(rng, dt, ls, off - 8, off + 8);
  rf_tensor *labels = rf_test_random_tensor(rng, lt, bs, 0, (double)c);
  rf_tensor *dloss = rf_test_random_tensor(rng, dt, bs, -2, 2);
  rf_tensor *bpv = rf_test_random_tensor(rng, dt, ls, -1, 1);
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "logits", dt, ls);
  rf_output lp = rf_placeholder(g, "labels", lt, bs);
  rf_output dp = rf_placeholder(g, "dloss", dt, bs);
  rf_output bpp = rf_placeholder(g, "bp", dt, ls);
  rf_output loss = rf_sparse_softmax_cross_entropy(g, "xent", xp, lp);
  assert_graph_ok(g);
  rf_output backprop = {loss.node, 1};
  rf_output gin[2] = {dp, bpp};
  rf_output f[3] = {loss, backprop, internal(g, "_SparseXentGrad", gin, 2)};
  rf_shape built = rf_output_shape(loss);
  assert_true(rf_shape_equal(&built, &bs));
  built = rf_output_shape(backprop);
  assert_true(rf_shape_equal(&built, &ls));
  rf_feed feeds[4] = {{xp, x}, {lp, labels}, {dp, dloss}, {bpp, bpv}};
  rf_tensor *outs[3];
  rf_test_run(g, 1, feeds, 4, f, 3, outs);
  double *xd = rf_test_to_doubles(x);
  double *sm = ref_softmax(xd, b * c, c);
  double *want_loss = calloc((size_t)b + 1, sizeof(double));
  double *want_grad = calloc((size_t)(b * c) + 1, sizeof(double));
  for (int64_t r = 0; r < b; r++) {
    int64_t l = (int64_t)rf_tensor_get(labels, r);
    sm[r * c + l] -= 1; /* backprop = softmax - onehot */
    for (int64_t j = 0; j < c; j++)
      want_grad[r * c + j] =
          rf_tensor_get(bpv, r * c + j) * rf_tensor_get(dloss, r);
    /* loss = logsumexp - x[label], in the stable form. */
    const double *xr = xd + r * c;
    double m = xr[0], s = 0;
    for (int64_t j = 1; j < c; j++) m = fmax(m, xr[j]);
    for (int64_t j = 0; j < c; j++) s += exp(xr[j] - m);
    want_loss[r] = log(s) - (xr[(int64_t)rf_tensor_get(labels, r)] - m);
  }
  double tol = rf_test_tolerance(dt);
  assert_tensor_near(outs[0], bs, want_loss, tol);
  assert_tensor_near(outs[1], ls, sm, tol);
  assert_tensor_near(outs[2], ls, want_grad, tol);
  free(xd);
  free(sm);
  free(want_loss);
  free(want_grad);
  for (int i = 0; i < 3; i++) rf_tensor_release(outs[i]);
  rf_tensor_release(x);
  rf_tensor_release(labels);
  rf_tensor_release(dloss);
  rf_tensor_release(bpv);
  rf_graph_free(g);
}

static void test_sparse_xent_every_dtype(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(7);
  static const int64_t bc[][2] = {{0, 3}, {1, 1}, {5, 10}, {33, 257}};
  for (int d = 0; d < 4; d++)
    for (int l = 0; l < 2; l++)
      for (int s = 0; s < 4; s++)
        check_xent(&rng, floats[d], l ? RF_INT64 : RF_INT32, bc[s][0], bc[s][1],
                   s % 2 ? 1000 : -1000);
}

/* Runs xent on logits (b, c) with nl labels, all shapes unknown until run
 * time; returns the status. */
static rf_status *xent_run(rf_dtype lt, const double *labels, int64_t nl,
                           int64_t b, int64_t c) {
  uint64_t rng = rf_test_rng(8);
  rf_tensor *x =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, b, c), -1, 1);
  rf_shape bs = rf_shape_of(1, nl);
  rf_tensor *l;
  assert_ok(rf_tensor_new(lt, &bs, NULL, &l));
  for (int64_t i = 0; i < nl; i++) rf_tensor_set(l, i, labels[i]);
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "logits", RF_FLOAT32, rf_shape_unknown());
  rf_output lp = rf_placeholder(g, "labels", lt, rf_shape_unknown());
  rf_output loss = rf_sparse_softmax_cross_entropy(g, "xent", xp, lp);
  assert_graph_ok(g);
  rf_feed feeds[2] = {{xp, x}, {lp, l}};
  rf_tensor *out = NULL;
  rf_status *st = rf_test_try_run(g, feeds, 2, &loss, 1, &out);
  assert_null(out);
  rf_tensor_release(x);
  rf_tensor_release(l);
  rf_graph_free(g);
  return st;
}

static void test_sparse_xent_errors(void **state) {
  (void)state;
  /* Run time: a label outside [0, c) names its index and value. */
  rf_status *st = xent_run(RF_INT32, (double[]){0, 3, 4, 1}, 4, 4, 4);
  assert_true(strstr(rf_status_message(st), "xent") != NULL);
  assert_status(st, RF_INVALID_ARGUMENT, "label value 4 at labels[2]");
  assert_status(xent_run(RF_INT64, (double[]){-1, 0}, 2, 2, 3),
                RF_INVALID_ARGUMENT, "label value -1 at labels[0]");
  assert_status(xent_run(RF_INT64, (double[]){0}, 1, 1, 0), RF_INVALID_ARGUMENT,
                "[0, 0)");
  /* Run time: labels that do not match the batch. */
  assert_status(xent_run(RF_INT32, (double[]){0, 0}, 2, 3, 4),
                RF_INVALID_ARGUMENT, "labels must be (3)");
  /* Build time: ranks and batch sizes. */
  rf_shape m = rf_shape_of(2, (int64_t)3, (int64_t)4);
  assert_status(build_status(5, RF_FLOAT32, rf_shape_of(1, (int64_t)3),
                             RF_INT32, rf_shape_of(1, (int64_t)3)),
                RF_INVALID_ARGUMENT, "logits must have rank 2");
  assert_status(build_status(5, RF_FLOAT32, m, RF_INT32, m),
                RF_INVALID_ARGUMENT, "labels must have rank 1");
  assert_status(
      build_status(5, RF_FLOAT32, m, RF_INT64, rf_shape_of(1, (int64_t)4)),
      RF_INVALID_ARGUMENT, "does not match the rows of logits");
}

/* Every allocation failure inside the kernels of the two-output
 * cross-entropy and _BiasAddGrad (which sums through scratch buffers) is
 * RESOURCE_EXHAUSTED and leaks nothing. */
static void test_allocation_failures(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(9);
  rf_shape ls = rf_shape_of(2, 6, 5), bs = rf_shape_of(1, 6),
           big = rf_shape_of(3, 40000, 2, 5);
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32, ls, -1, 1);
  rf_tensor *l = rf_test_random_tensor(&rng, RF_INT64, bs, 0, 5);
  rf_tensor *d = rf_test_random_tensor(&rng, RF_BFLOAT16, big, -1, 1);
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", RF_FLOAT32, ls);
  rf_output lp = rf_placeholder(g, "l", RF_INT64, bs);
  rf_output dp = rf_placeholder(g, "d", RF_BFLOAT16, big);
  rf_node *nodes[2] = {rf_sparse_softmax_cross_entropy(g, NULL, xp, lp).node,
                       internal(g, "_BiasAddGrad", &dp, 1).node};
  assert_graph_ok(g);
  rf_tensor *in[2][2] = {{x, l}, {d}};
  for (int i = 0; i < 2; i++) rf_test_kernel_under_faults(nodes[i], in[i]);
  rf_tensor_release(x);
  rf_tensor_release(l);
  rf_tensor_release(d);
  rf_graph_free(g);
}

/* Kernels check the dtypes they read, whatever the graph said. */
static void test_kernels_check_input_dtypes(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(10);
  rf_graph *g = rf_graph_new();
  rf_shape m = rf_shape_of(2, 2, 3), v = rf_shape_of(1, 3);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, m);
  rf_output b = rf_placeholder(g, "b", RF_FLOAT32, v);
  rf_node *badd = rf_bias_add(g, "badd", x, b).node;
  rf_node *sm = rf_softmax(g, "sm", x).node;
  assert_graph_ok(g);
  rf_tensor *xt = rf_test_random_tensor(&rng, RF_FLOAT32, m, -1, 1);
  rf_tensor *bt = rf_test_random_tensor(&rng, RF_FLOAT64, v, -1, 1);
  rf_tensor *it = rf_test_random_tensor(&rng, RF_INT32, m, -1, 1);
  rf_tensor *in[2] = {xt, bt}, *out[1] = {NULL};
  assert_status(rf__kernel_run_single(badd, in, out), RF_INVALID_ARGUMENT,
                "input 1 has dtype float64; expected float32");
  assert_status(rf__kernel_run_single(sm, &it, out), RF_INVALID_ARGUMENT,
                "input 0 has dtype int32");
  assert_null(out[0]);
  rf_tensor_release(xt);
  rf_tensor_release(bt);
  rf_tensor_release(it);
  rf_graph_free(g);
}

/* ---- gradient functions, through rf_gradients ---- */

/* dx = d(sum(y * gy))/dx for y = op(x...), with gy fed: checks the gradient
 * function of each op builds the right internal op with the right inputs. */
static void test_gradients_through_rf_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(11);
  for (int d = 0; d < 4; d++) {
    rf_dtype dt = floats[d];
    int64_t b = 3, c = 5;
    rf_shape ms = rf_shape_of(2, b, c), vs = rf_shape_of(1, c),
             bs = rf_shape_of(1, b);
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "x", dt, ms);
    rf_output bias = rf_placeholder(g, "bias", dt, vs);
    rf_output labels = rf_placeholder(g, "labels", RF_INT32, bs);
    rf_output gy = rf_placeholder(g, "gy", dt, ms);
    rf_output gl = rf_placeholder(g, "gl", dt, bs);
    enum { NY = 6 };
    rf_output ys[NY] = {rf_relu(g, "relu", x),
                        rf_sigmoid(g, "sig", x),
                        rf_tanh(g, "tanh", x),
                        rf_softmax(g, "sm", x),
                        rf_bias_add(g, "badd", x, bias),
                        rf_sparse_softmax_cross_entropy(g, "xent", x, labels)};
    rf_output dxs[NY + 2];
    for (int i = 0; i < NY; i++)
      assert_ok(rf_gradients(g, &ys[i], 1, &x, 1, i == 5 ? &gl : &gy, &dxs[i]));
    assert_ok(rf_gradients(g, &ys[4], 1, &bias, 1, &gy, &dxs[NY]));
    assert_ok(rf_gradients(g, &ys[5], 1, &labels, 1, &gl, &dxs[NY + 1]));
    assert_null(dxs[NY + 1].node); /* labels get no gradient */
    rf_output backprop = {ys[5].node, 1};
    rf_output fetch[NY + 2] = {dxs[0], dxs[1], dxs[2],  dxs[3],
                               dxs[4], dxs[5], dxs[NY], backprop};
    rf_tensor *xv = rf_test_random_tensor(&rng, dt, ms, -3, 3);
    rf_tensor *bv = rf_test_random_tensor(&rng, dt, vs, -1, 1);
    rf_tensor *lv = rf_test_random_tensor(&rng, RF_INT32, bs, 0, (double)c);
    rf_tensor *gyv = rf_test_random_tensor(&rng, dt, ms, -1, 1);
    rf_tensor *glv = rf_test_random_tensor(&rng, dt, bs, -1, 1);
    rf_feed feeds[5] = {
        {x, xv}, {bias, bv}, {labels, lv}, {gy, gyv}, {gl, glv}};
    rf_tensor *o[NY + 2];
    rf_test_run(g, 1, feeds, 5, fetch, NY + 2, o);
    double *xd = rf_test_to_doubles(xv), *gd = rf_test_to_doubles(gyv);
    double *sm = ref_softmax(xd, b * c, c);
    double want[NY + 1][15];
    for (int r = 0; r < b; r++) {
      double dot = 0;
      for (int j = 0; j < c; j++) dot += gd[r * c + j] * sm[r * c + j];
      for (int j = 0; j < c; j++) {
        int i = r * (int)c + j;
        double xi = xd[i], gi = gd[i], s = 1 / (1 + exp(-xi)), t = tanh(xi);
        want[0][i] = xi > 0 ? gi : 0;
        want[1][i] = gi * s * (1 - s);
        want[2][i] = gi * (1 - t * t);
        want[3][i] = (gi - dot) * sm[i];
        want[4][i] = gi;
        want[5][i] = rf_tensor_get(o[NY + 1], i) * rf_tensor_get(glv, r);
      }
    }
    for (int j = 0; j < c; j++) {
      want[6][j] = 0;
      for (int r = 0; r < b; r++) want[6][j] += gd[r * c + j];
    }
    /* Sigmoid/Tanh gradients use the rounded forward output: a looser
     * bound for the 16-bit types. */
    double tol = rf_test_tolerance(dt) * (d < 2 ? 4 : 1);
    for (int i = 0; i < NY; i++) assert_tensor_near(o[i], ms, want[i], tol);
    assert_tensor_near(o[NY], vs, want[6], tol);
    for (int i = 0; i < NY + 2; i++) rf_tensor_release(o[i]);
    free(xd);
    free(gd);
    free(sm);
    rf_tensor_release(xv);
    rf_tensor_release(bv);
    rf_tensor_release(lv);
    rf_tensor_release(gyv);
    rf_tensor_release(glv);
    rf_graph_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_activations_every_dtype),
      cmocka_unit_test(test_dtypes_outside_the_op_are_rejected),
      cmocka_unit_test(test_bias_add_and_grad),
      cmocka_unit_test(test_bias_add_errors),
      cmocka_unit_test(test_softmax_and_grad),
      cmocka_unit_test(test_softmax_of_a_scalar_fails),
      cmocka_unit_test(test_sparse_xent_every_dtype),
      cmocka_unit_test(test_sparse_xent_errors),
      cmocka_unit_test(test_allocation_failures),
      cmocka_unit_test(test_kernels_check_input_dtypes),
      cmocka_unit_test(test_gradients_through_rf_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
