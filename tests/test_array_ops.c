/* tests/test_array_ops.c - Const, Placeholder, Identity, NoOp, Reshape, Shape,
 * Fill, ZerosLike, OnesLike through the public API and a session: every dtype,
 * fresh random data, element counts 0, 1, odd; build-time and run-time errors;
 * Reshape's zero-copy view and the Reshape/Identity gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "kernels/kernel.h"
#include "testutil.h"

static const rf_dtype all_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                      RF_FLOAT64, RF_INT8,     RF_UINT8,
                                      RF_INT32,   RF_INT64,    RF_BOOL};
#define NUM_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

static rf_tensor *random_of(rf_dtype dt, rf_shape shape) {
  double lo = dt == RF_UINT8 ? 0 : -100, hi = dt == RF_UINT8 ? 250 : 100;
  if (rf_dtype_is_float(dt)) lo = -10, hi = 10;
  return rf_test_random_tensor(&rng, dt, shape, lo, hi);
}

/* Asserts got holds exactly want's elements with `shape`. */
static void assert_same_values(const rf_tensor *got, const rf_tensor *want,
                               rf_shape shape) {
  assert_int_equal(rf_tensor_dtype(got), rf_tensor_dtype(want));
  double *w = rf_test_to_doubles(want);
  assert_tensor_near(got, shape, w, 0.0);
  free(w);
}

/* One run on a fresh session with one device; returns the status. */
static rf_status *try_run(rf_graph *g, const rf_feed *feeds, int nfeeds,
                          const rf_output *fetches, int n, rf_tensor **outs) {
  assert_graph_ok(g);
  return rf_test_try_run(g, feeds, nfeeds, fetches, n, outs);
}

static rf_tensor *run1(rf_graph *g, const rf_feed *feeds, int nfeeds,
                       rf_output fetch) {
  rf_tensor *out = NULL;
  rf_test_run(g, 1, feeds, nfeeds, &fetch, 1, &out);
  return out;
}

/* Makes n fetches from x in g. */
typedef void (*build_fn)(rf_graph *g, rf_output x, rf_output *fetches);

/* Runs the n fetches build makes from a placeholder of value's dtype, its
 * shape known only at run time, fed value: outs[0..n) get the results. */
static void run_fed(rf_tensor *value, build_fn build, int n, rf_tensor **outs) {
  rf_graph *g = rf_graph_new();
  rf_output x =
      rf_placeholder(g, "x", rf_tensor_dtype(value), rf_shape_unknown());
  rf_output fetches[4];
  build(g, x, fetches);
  assert_graph_ok(g);
  rf_feed feed = {x, value};
  rf_test_run(g, 1, &feed, 1, fetches, n, outs);
  rf_graph_free(g);
}

/* Shapes with 0, 1, odd and larger element counts. */
static rf_shape test_shape(int k) {
  switch (k % 4) {
    case 0: return rf_shape_of(2, 0, 3);
    case 1: return rf_shape_scalar();
    case 2: return rf_shape_of(3, 3, 1, 5);
    default: return rf_shape_of(2, 17, 33);
  }
}

static void test_const_every_dtype(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    for (int k = 0; k < 4; k++) {
      rf_shape shape = test_shape(k);
      rf_tensor *value = random_of(all_dtypes[d], shape);
      rf_graph *g = rf_graph_new();
      rf_output c = rf_const(g, "c", value);
      assert_graph_ok(g);
      assert_int_equal(rf_output_dtype(c), all_dtypes[d]);
      rf_shape s = rf_output_shape(c);
      assert_true(rf_shape_equal(&s, &shape));
      /* The node retained the tensor: the result survives our release. */
      rf_tensor *keep = rf_tensor_retain(value);
      rf_tensor_release(value);
      rf_tensor *out = run1(g, NULL, 0, c);
      assert_same_values(out, keep, shape);
      rf_tensor_release(out);
      rf_tensor_release(keep);
      rf_graph_free(g);
    }
  }
}

static void test_const_scalar(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    rf_dtype dt = all_dtypes[d];
    double v = dt == RF_BOOL ? 1.0 : floor(rf_test_uniform(&rng, 1, 100));
    rf_graph *g = rf_graph_new();
    rf_output c = rf_const_scalar(g, NULL, dt, v);
    rf_tensor *out = run1(g, NULL, 0, c);
    assert_tensor_near(out, rf_shape_scalar(), &v, 0.0);
    rf_tensor_release(out);
    rf_graph_free(g);
  }
}

static void test_const_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output c = rf_const(g, "c", NULL);
  assert_null(c.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "NULL");
  rf_graph_free(g);
  g = rf_graph_new();
  c = rf_const_scalar(g, "c", RF_RESOURCE, 1.0);
  assert_null(c.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "resource");
  rf_graph_free(g);
}

static void build_identity(rf_graph *g, rf_output x, rf_output *fetches) {
  fetches[0] = x;
  fetches[1] = rf_identity(g, "y", x);
  assert_int_equal(rf_output_dtype(fetches[1]), rf_output_dtype(x));
}

/* Placeholder fed directly and through Identity, every dtype. */
static void test_placeholder_and_identity(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    for (int k = 0; k < 4; k++) {
      rf_shape shape = test_shape(k);
      rf_tensor *value = random_of(all_dtypes[d], shape);
      rf_tensor *outs[2];
      run_fed(value, build_identity, 2, outs);
      for (int i = 0; i < 2; i++) {
        assert_same_values(outs[i], value, shape);
        rf_tensor_release(outs[i]);
      }
      rf_tensor_release(value);
    }
  }
}

static void test_placeholder_static_shape(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_shape want = rf_shape_of(2, -1, 4);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, want);
  rf_output y = rf_identity(g, NULL, x);
  assert_graph_ok(g);
  rf_shape s = rf_output_shape(y);
  assert_true(rf_shape_equal(&s, &want));
  rf_graph_free(g);
}

static void test_unfed_placeholder(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, -1, 3));
  rf_output y = rf_identity(g, "y", x);
  rf_tensor *out = NULL;
  assert_status(try_run(g, NULL, 0, &y, 1, &out), RF_INVALID_ARGUMENT,
                "You must feed a value for placeholder 'x' with dtype float32 "
                "and shape (?, 3)");
  assert_null(out);
  rf_graph_free(g);
}

static void test_noop(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output c = rf_const_scalar(g, "c", RF_FLOAT32, 2);
  rf_node *n = rf_noop(g, "n");
  assert_non_null(n);
  assert_int_equal(rf_node_num_outputs(n), 0);
  assert_ok(rf_graph_add_control_edge(g, c.node, n));
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, NULL, &s));
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &n, 1, NULL));
  rf_session_free(s);
  rf_graph_free(g);
}

/* A Const int32 or int64 shape vector. */
static rf_output shape_const(rf_graph *g, rf_dtype dt, int rank,
                             const int64_t *dims) {
  rf_shape vs = rf_shape_of(1, (int64_t)rank);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(dt, &vs, NULL, &t));
  for (int i = 0; i < rank; i++) rf_tensor_set(t, i, (double)dims[i]);
  rf_output o = rf_const(g, NULL, t);
  rf_tensor_release(t);
  return o;
}

/* Reshape (a, b, c) -> (c, -1) and -> (a*b*c), both index dtypes, with the
 * shape known at build time (Const) and only at run time (fed). */
static void test_reshape_every_dtype(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    for (int fed = 0; fed < 2; fed++) {
      rf_dtype it = (d + fed) % 2 ? RF_INT64 : RF_INT32;
      int64_t a = 1 + (int64_t)(rf_test_rand(&rng) % 4), b = 3, c = 5;
      rf_shape in_shape = rf_shape_of(3, a, b, c);
      rf_tensor *x = random_of(all_dtypes[d], in_shape);
      int64_t dims[2] = {c, -1};
      rf_graph *g = rf_graph_new();
      rf_output xp = rf_placeholder(g, "x", all_dtypes[d], in_shape);
      rf_output sh, sp = {NULL, 0};
      rf_tensor *sv = NULL;
      if (fed) {
        sp = rf_placeholder(g, "s", it, rf_shape_of(1, 2));
        sh = sp;
        rf_shape vs = rf_shape_of(1, 2);
        assert_ok(rf_tensor_new(it, &vs, NULL, &sv));
        rf_tensor_set(sv, 0, (double)c);
        rf_tensor_set(sv, 1, -1);
      } else {
        sh = shape_const(g, it, 2, dims);
      }
      rf_output y = rf_reshape(g, "y", xp, sh);
      int64_t flat = a * b * c;
      rf_output z = rf_reshape_to(g, "z", y, 1, &flat);
      assert_graph_ok(g);
      rf_shape want = rf_shape_of(2, c, a * b), ys = rf_output_shape(y);
      rf_shape want_static = fed ? rf_shape_of(2, -1, -1) : want;
      assert_true(rf_shape_equal(&ys, &want_static));
      rf_feed feeds[2] = {{xp, x}, {sp, sv}};
      rf_output fetches[2] = {y, z};
      rf_tensor *outs[2];
      rf_test_run(g, 1, feeds, fed ? 2 : 1, fetches, 2, outs);
      assert_same_values(outs[0], x, want);
      assert_same_values(outs[1], x, rf_shape_of(1, flat));
      for (int i = 0; i < 2; i++) rf_tensor_release(outs[i]);
      rf_tensor_release(x);
      rf_tensor_release(sv);
      rf_graph_free(g);
    }
  }
}

/* Reshape to and from empty and scalar shapes. */
static void test_reshape_edge_sizes(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_tensor *one = random_of(RF_FLOAT32, rf_shape_of(3, 1, 1, 1));
  rf_tensor *empty = random_of(RF_INT32, rf_shape_of(2, 0, 4));
  rf_output s = rf_reshape_to(g, NULL, rf_const(g, NULL, one), 0, NULL);
  int64_t d[3] = {2, 0, 7};
  rf_output e = rf_reshape_to(g, NULL, rf_const(g, NULL, empty), 3, d);
  rf_output fetches[2] = {s, e};
  rf_tensor *outs[2];
  rf_test_run(g, 1, NULL, 0, fetches, 2, outs);
  assert_same_values(outs[0], one, rf_shape_scalar());
  assert_same_values(outs[1], empty, rf_shape_of(3, 2, 0, 7));
  for (int i = 0; i < 2; i++) rf_tensor_release(outs[i]);
  rf_tensor_release(one);
  rf_tensor_release(empty);
  rf_graph_free(g);
}

/* Each bad shape is an error when the graph is built. */
static void test_reshape_build_errors(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t dims[3];
    const char *msg;
  } cases[] = {
      {2, {4, 2}, "cannot reshape a tensor of 6 elements into shape [4, 2]"},
      {2, {-1, 4}, "cannot reshape a tensor of 6 elements into shape [-1, 4]"},
      {3, {-1, 2, -1}, "only one dimension of shape [-1, 2, -1] may be -1"},
      {2, {-2, 3}, "dimension 0 of shape [-2, 3] is negative"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 2, 3));
    rf_output y = rf_reshape_to(g, "y", x, cases[i].rank, cases[i].dims);
    assert_null(y.node);
    assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, cases[i].msg);
    rf_graph_free(g);
  }
  /* A shape that is not a vector, and one of a float dtype. */
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output m = rf_placeholder(g, "m", RF_INT32, rf_shape_of(2, 1, 2));
  assert_null(rf_reshape(g, "y", x, m).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "shape must be a vector, got shape (1, 2)");
  rf_graph_clear_status(g);
  rf_output f = rf_placeholder(g, "f", RF_FLOAT32, rf_shape_of(1, 2));
  assert_null(rf_reshape(g, "y2", x, f).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(g);
}

/* Sizes known only at run time: the kernel reports the mismatch, naming the
 * node. */
static void test_reshape_run_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_unknown());
  int64_t dims[2] = {4, 2};
  rf_output y = rf_reshape_to(g, "y", x, 2, dims);
  rf_output s = rf_placeholder(g, "s", RF_INT64, rf_shape_unknown());
  rf_output z = rf_reshape(g, "z", x, s);
  assert_graph_ok(g);
  rf_tensor *xv = random_of(RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_feed feed = {x, xv};
  rf_tensor *out = NULL;
  assert_status(try_run(g, &feed, 1, &y, 1, &out), RF_INVALID_ARGUMENT,
                "cannot reshape a tensor of 6 elements into shape [4, 2]");
  assert_status(try_run(g, &feed, 1, &y, 1, &out), RF_INVALID_ARGUMENT, "'y'");
  rf_tensor *sv = random_of(RF_INT64, rf_shape_of(2, 1, 2));
  rf_feed feeds[2] = {{x, xv}, {s, sv}};
  assert_status(try_run(g, feeds, 2, &z, 1, &out), RF_INVALID_ARGUMENT,
                "shape must be a vector, got shape (1, 2)");
  assert_null(out);
  rf_tensor_release(sv);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

/* Shape of every input dtype, as int32 and int64, with dims known only at run
 * time (and zero-size dims). */
static void test_shape_op(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    for (int k = 0; k < 4; k++) {
      rf_dtype ot = (d + k) % 2 ? RF_INT64 : RF_INT32;
      rf_shape shape = test_shape(k);
      rf_tensor *x = random_of(all_dtypes[d], shape);
      rf_graph *g = rf_graph_new();
      rf_output xp = rf_placeholder(g, "x", all_dtypes[d], rf_shape_unknown());
      rf_output s = rf_shape_of_op(g, "s", xp, ot);
      rf_output xs =
          rf_placeholder(g, "xs", all_dtypes[d], rf_shape_of(2, -1, 7));
      rf_output s2 = rf_shape_of_op(g, "s2", xs, ot);
      assert_graph_ok(g);
      assert_int_equal(rf_output_dtype(s), ot);
      rf_shape s2s = rf_output_shape(s2), vec2 = rf_shape_of(1, 2);
      assert_true(rf_shape_equal(&s2s, &vec2));
      rf_feed feed = {xp, x};
      rf_tensor *out = run1(g, &feed, 1, s);
      double want[RF_MAX_RANK];
      for (int i = 0; i < shape.rank; i++) want[i] = (double)shape.dims[i];
      assert_int_equal(rf_tensor_dtype(out), ot);
      assert_tensor_near(out, rf_shape_of(1, (int64_t)shape.rank), want, 0.0);
      rf_tensor_release(out);
      rf_tensor_release(x);
      rf_graph_free(g);
    }
  }
}

/* Fill every dtype; dims as a Const (static shape known) or fed. */
static void test_fill_every_dtype(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    for (int k = 0; k < 4; k++) {
      rf_dtype it = k % 2 ? RF_INT64 : RF_INT32;
      rf_shape shape = test_shape(k);
      rf_tensor *value = random_of(all_dtypes[d], rf_shape_scalar());
      rf_graph *g = rf_graph_new();
      rf_output dims = shape_const(g, it, shape.rank, shape.dims);
      rf_output y = rf_fill(g, "y", dims, rf_const(g, "v", value));
      assert_graph_ok(g);
      rf_shape ys = rf_output_shape(y);
      assert_true(rf_shape_equal(&ys, &shape));
      rf_tensor *out = run1(g, NULL, 0, y);
      int64_t n = rf_shape_num_elements(&shape);
      double *want = malloc(sizeof(double) * (size_t)(n + 1));
      for (int64_t i = 0; i < n; i++) want[i] = rf_tensor_get(value, 0);
      assert_int_equal(rf_tensor_dtype(out), all_dtypes[d]);
      assert_tensor_near(out, shape, want, 0.0);
      free(want);
      rf_tensor_release(out);
      rf_tensor_release(value);
      rf_graph_free(g);
    }
  }
}

static void test_fill_errors(void **state) {
  (void)state;
  /* Build time: a matrix of dims, a vector value, negative dims. */
  rf_graph *g = rf_graph_new();
  rf_output v = rf_const_scalar(g, "v", RF_FLOAT32, 1);
  rf_output md = rf_placeholder(g, "md", RF_INT32, rf_shape_of(2, 2, 2));
  assert_null(rf_fill(g, "f", md, v).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "dims must be a vector, got shape (2, 2)");
  rf_graph_clear_status(g);
  int64_t two = 2, neg[2] = {3, -1};
  rf_output vd = shape_const(g, RF_INT32, 1, &two);
  rf_output vv = rf_placeholder(g, "vv", RF_FLOAT32, rf_shape_of(1, 2));
  assert_null(rf_fill(g, "f", vd, vv).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "value must be a scalar, got shape (2)");
  rf_graph_clear_status(g);
  assert_null(rf_fill(g, "f", shape_const(g, RF_INT64, 2, neg), v).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "dims [3, -1] has a negative entry");
  rf_graph_clear_status(g);
  /* Run time: dims of unknown shape fed with a matrix, or negative. */
  rf_output ud = rf_placeholder(g, "ud", RF_INT32, rf_shape_unknown());
  rf_output f = rf_fill(g, "f", ud, v);
  assert_graph_ok(g);
  rf_tensor *mat = random_of(RF_INT32, rf_shape_of(2, 1, 2));
  rf_feed feed = {ud, mat};
  rf_tensor *out = NULL;
  assert_status(try_run(g, &feed, 1, &f, 1, &out), RF_INVALID_ARGUMENT,
                "dims must be a vector, got shape (1, 2)");
  rf_tensor *nd = NULL;
  rf_shape two_s = rf_shape_of(1, 2);
  assert_ok(rf_tensor_new(RF_INT32, &two_s, NULL, &nd));
  rf_tensor_set(nd, 0, 2);
  rf_tensor_set(nd, 1, -4);
  feed.value = nd;
  assert_status(try_run(g, &feed, 1, &f, 1, &out), RF_INVALID_ARGUMENT,
                "dims [2, -4] has a negative entry");
  assert_null(out);
  rf_tensor_release(mat);
  rf_tensor_release(nd);
  rf_graph_free(g);
}

static void build_zeros_ones(rf_graph *g, rf_output x, rf_output *fetches) {
  fetches[0] = rf_zeros_like(g, "z", x);
  fetches[1] = rf_ones_like(g, "o", x);
}

static void test_zeros_ones_like(void **state) {
  (void)state;
  for (int d = 0; d < NUM_DTYPES; d++) {
    for (int k = 0; k < 4; k++) {
      rf_shape shape = test_shape(k);
      rf_tensor *x = random_of(all_dtypes[d], shape);
      rf_tensor *outs[2];
      run_fed(x, build_zeros_ones, 2, outs);
      int64_t n = rf_shape_num_elements(&shape);
      double *want = calloc((size_t)n + 1, sizeof(double));
      assert_tensor_near(outs[0], shape, want, 0.0);
      for (int64_t i = 0; i < n; i++) want[i] = 1.0;
      assert_tensor_near(outs[1], shape, want, 0.0);
      for (int i = 0; i < 2; i++) {
        assert_int_equal(rf_tensor_dtype(outs[i]), all_dtypes[d]);
        rf_tensor_release(outs[i]);
      }
      free(want);
      rf_tensor_release(x);
    }
  }
}

/* Reshape's output is a view: same buffer, its own shape, and it keeps the
 * buffer alive; a shared buffer is never "sole owned". */
static void test_reshape_view(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 4, 6));
  int64_t dims[3] = {2, -1, 3};
  rf_output y = rf_reshape_to(g, "y", x, 3, dims);
  assert_graph_ok(g);
  rf_tensor *xv = random_of(RF_FLOAT32, rf_shape_of(2, 4, 6));
  rf_tensor *sv = NULL, *out = NULL;
  rf_shape vs = rf_shape_of(1, 3);
  assert_ok(rf_tensor_new_copy(RF_INT64, &vs, dims, &sv));
  rf_tensor *ins[2] = {xv, sv};
  assert_ok(rf__kernel_run_single(y.node, ins, &out));
  assert_ptr_equal(rf_tensor_data(out), rf_tensor_data(xv));
  rf_shape want = rf_shape_of(3, 2, 4, 3), got = rf_tensor_shape(out);
  assert_true(rf_shape_equal(&got, &want));
  assert_false(rf__tensor_is_sole_owner(out)); /* we still hold xv */
  rf_tensor_release(xv);
  assert_true(rf__tensor_is_sole_owner(out)); /* only the view holds it */
  /* A view of a view points at the owner. */
  rf_tensor *vv = NULL;
  rf_shape flat = rf_shape_of(1, 24);
  assert_ok(rf__tensor_new_view(out, &flat, &vv));
  assert_ptr_equal(vv->base, out->base);
  assert_false(rf__tensor_is_sole_owner(out));
  assert_status(rf__tensor_new_view(out, &vs, &vv), RF_INVALID_ARGUMENT,
                "24 elements");
  rf_tensor_release(out);
  assert_true(rf__tensor_is_sole_owner(vv));
  rf_tensor_release(vv);
  rf_tensor_release(sv);
  rf_graph_free(g);
}

/* Allocation failures inside the kernels give RESOURCE_EXHAUSTED and leak
 * nothing. */
static void test_kernel_allocation_failures(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT16, rf_shape_unknown());
  rf_output d = rf_placeholder(g, "d", RF_INT32, rf_shape_of(1, 2));
  rf_output v = rf_placeholder(g, "v", RF_FLOAT16, rf_shape_scalar());
  rf_node *nodes[4] = {
      rf_reshape(g, NULL, x, d).node, rf_fill(g, NULL, d, v).node,
      rf_ones_like(g, NULL, x).node, rf_shape_of_op(g, NULL, x, RF_INT64).node};
  assert_graph_ok(g);
  rf_tensor *xv = random_of(RF_FLOAT16, rf_shape_of(2, 3, 4));
  rf_tensor *dv = NULL, *vv = random_of(RF_FLOAT16, rf_shape_scalar());
  int64_t dims[2] = {4, 3};
  rf_shape two = rf_shape_of(1, 2);
  assert_ok(rf_tensor_new(RF_INT32, &two, NULL, &dv));
  for (int i = 0; i < 2; i++) rf_tensor_set(dv, i, (double)dims[i]);
  rf_tensor *inputs[4][2] = {{xv, dv}, {dv, vv}, {xv, NULL}, {xv, NULL}};
  for (int n = 0; n < 4; n++) rf_test_kernel_under_faults(nodes[n], inputs[n]);
  rf_tensor_release(xv);
  rf_tensor_release(dv);
  rf_tensor_release(vv);
  rf_graph_free(g);
}

/* d(reshape(x))/dx = reshape(dy, shape(x)); Identity passes dy through. */
static void test_gradients(void **state) {
  (void)state;
  for (int d = 0; d < 4; d++) { /* the float dtypes */
    rf_dtype dt = all_dtypes[d];
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "x", dt, rf_shape_unknown());
    int64_t dims[2] = {-1, 2};
    rf_output y = rf_identity(g, "i", rf_reshape_to(g, "r", x, 2, dims));
    rf_output dy = rf_placeholder(g, "dy", dt, rf_shape_unknown());
    rf_output dx;
    assert_ok(rf_gradients(g, &y, 1, &x, 1, &dy, &dx));
    rf_tensor *xv = random_of(dt, rf_shape_of(3, 2, 3, 2));
    rf_tensor *dyv = random_of(dt, rf_shape_of(2, 6, 2));
    rf_feed feeds[2] = {{x, xv}, {dy, dyv}};
    rf_tensor *out = run1(g, feeds, 2, dx);
    assert_same_values(out, dyv, rf_shape_of(3, 2, 3, 2));
    rf_tensor_release(out);
    rf_tensor_release(xv);
    rf_tensor_release(dyv);
    rf_graph_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_const_every_dtype),
      cmocka_unit_test(test_const_scalar),
      cmocka_unit_test(test_const_errors),
      cmocka_unit_test(test_placeholder_and_identity),
      cmocka_unit_test(test_placeholder_static_shape),
      cmocka_unit_test(test_unfed_placeholder),
      cmocka_unit_test(test_noop),
      cmocka_unit_test(test_reshape_every_dtype),
      cmocka_unit_test(test_reshape_edge_sizes),
      cmocka_unit_test(test_reshape_build_errors),
      cmocka_unit_test(test_reshape_run_errors),
      cmocka_unit_test(test_shape_op),
      cmocka_unit_test(test_fill_every_dtype),
      cmocka_unit_test(test_fill_errors),
      cmocka_unit_test(test_zeros_ones_like),
      cmocka_unit_test(test_reshape_view),
      cmocka_unit_test(test_kernel_allocation_failures),
      cmocka_unit_test(test_gradients),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
