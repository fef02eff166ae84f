/* tests/test_shape_grad.c - gradients of the shape ops (Transpose, Concat,
 * Split, Slice, ExpandDims, Squeeze, Pad, Tile) as rf_gradients builds them,
 * run in a session, against central finite differences in float64: y =
 * sum(f(x) * r) for a fixed random r, each element of dy/dx against
 * (y(x + h e_i) - y(x - h e_i)) / 2h. Shapes with size-1 dims and empty
 * tensors; placeholders of known and of unknown shape (gradients then take
 * the run-time shapes of _PadTo, _SliceTo, _SplitLike), padding wider than
 * the input; and second order
 * (the gradient ops' own gradients): f = d sum(op(x)^2 * r1) / dx. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum {
  TRANSPOSE,
  CONCAT,
  SPLIT,
  SLICE,
  EXPAND,
  SQUEEZE,
  PAD,
  TILE,
};

typedef struct fd_case {
  const char *name;
  int op, nx;
  rf_shape shapes[3];
  int64_t a[8], b[8];
  int n;
} fd_case;

/* op(x[0..nx)) as one float64 tensor. */
static rf_output build_op(rf_graph *g, const rf_output *x, const fd_case *c) {
  switch (c->op) {
    case TRANSPOSE: return rf_transpose(g, NULL, x[0], c->a, c->n);
    case CONCAT: return rf_concat(g, NULL, x, c->nx, c->a[0]);
    case SPLIT: {
      /* pieces 2 and 0 joined: piece 1 gets no gradient (zeros) */
      rf_output p[3];
      rf_split_v(g, NULL, x[0], c->a, 3, c->b[0], p);
      rf_output q[2] = {p[2], p[0]};
      return rf_concat(g, NULL, q, 2, c->b[0]);
    }
    case SLICE: return rf_slice(g, NULL, x[0], c->a, c->b, c->n);
    case EXPAND: return rf_expand_dims(g, NULL, x[0], c->a[0]);
    case SQUEEZE: return rf_squeeze(g, NULL, x[0], c->a, c->n);
    case PAD: return rf_pad(g, NULL, x[0], c->a, c->n, 0.5);
    default: return rf_tile(g, NULL, x[0], c->a, c->n);
  }
}

/* Run once to learn a shape the graph does not know. */
static rf_shape run_shape(rf_graph *g, rf_output f, const rf_feed *feeds,
                          int n) {
  rf_shape s = rf_output_shape(f);
  if (rf_shape_is_fully_defined(&s)) return s;
  rf_tensor *v = NULL;
  rf_test_run(g, 1, feeds, n, &f, 1, &v);
  s = rf_tensor_shape(v);
  rf_tensor_release(v);
  return s;
}

/* sum(f * r) for a fresh random r of f's run-time shape. */
static rf_output weighted_sum(rf_graph *g, rf_output f, const rf_feed *feeds,
                              int n, uint64_t *rng) {
  rf_tensor *r =
      rf_test_random_tensor(rng, RF_FLOAT64, run_shape(g, f, feeds, n), -1, 1);
  rf_output fr = rf_mul(g, NULL, f, rf_const(g, NULL, r));
  rf_tensor_release(r);
  return rf_sum(g, NULL, fr, NULL, -1, false);
}

static double run_y(rf_session *s, rf_feed *feeds, int n, rf_output y) {
  rf_tensor *v = NULL;
  assert_ok(rf_session_run(s, feeds, n, &y, 1, NULL, 0, &v));
  double r = rf_tensor_get(v, 0);
  rf_tensor_release(v);
  return r;
}

static void check(const fd_case *c, bool unknown, bool second, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output x[3], dx[3];
  rf_feed feeds[3];
  for (int j = 0; j < c->nx; j++) {
    x[j] = rf_placeholder(g, NULL, RF_FLOAT64,
                          unknown ? rf_shape_unknown() : c->shapes[j]);
    feeds[j] = (rf_feed){
        x[j], rf_test_random_tensor(rng, RF_FLOAT64, c->shapes[j], -1, 1)};
  }
  rf_output f = build_op(g, x, c);
  assert_graph_ok(g);
  if (second) { /* f = d sum(op(x)^2 * r1) / dx[0] */
    rf_output inner = weighted_sum(g, rf_mul(g, NULL, f, f), feeds, c->nx, rng);
    assert_ok(rf_gradients(g, &inner, 1, x, 1, NULL, dx));
    f = dx[0];
  }
  rf_output y = weighted_sum(g, f, feeds, c->nx, rng);
  assert_graph_ok(g);
  assert_ok(rf_gradients(g, &y, 1, x, c->nx, NULL, dx));
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *got[3];
  for (int j = 0; j < c->nx; j++) assert_non_null(dx[j].node);
  assert_ok(rf_session_run(s, feeds, c->nx, dx, c->nx, NULL, 0, got));
  const double h = 1e-6, tol = 1e-6;
  for (int j = 0; j < c->nx; j++) {
    rf_shape gs = rf_tensor_shape(got[j]);
    if (!rf_shape_equal(&gs, &c->shapes[j]))
      fail_msg("%s: gradient of x%d has the wrong shape", c->name, j);
    rf_tensor *orig = feeds[j].value;
    for (int64_t i = 0; i < rf_tensor_num_elements(orig); i++) {
      double ys[2];
      for (int side = 0; side < 2; side++) {
        rf_tensor *p = NULL;
        assert_ok(rf_tensor_new_copy(RF_FLOAT64, &c->shapes[j],
                                     rf_tensor_data(orig), &p));
        ((double *)rf_tensor_mutable_data(p))[i] += side ? -h : h;
        feeds[j].value = p;
        ys[side] = run_y(s, feeds, c->nx, y);
        rf_tensor_release(p);
      }
      feeds[j].value = orig;
      double want = (ys[0] - ys[1]) / (2 * h), have = rf_tensor_get(got[j], i);
      if (!(fabs(have - want) <= tol * fmax(1.0, fabs(want))))
        fail_msg(
            "%s%s%s: d y / d x%d[%lld]: finite difference %.12g, "
            "gradient %.12g",
            c->name, unknown ? " (unknown shapes)" : "",
            second ? " (second order)" : "", j, (long long)i, want, have);
    }
    rf_tensor_release(got[j]);
  }
  for (int j = 0; j < c->nx; j++) rf_tensor_release(feeds[j].value);
  rf_session_free(s);
  rf_graph_free(g);
}

#define S(r, ...)      \
  {                    \
    r, { __VA_ARGS__ } \
  }

static const fd_case cases[] = {
    {"Transpose", TRANSPOSE, 1, {S(3, 2, 1, 3)}, {2, 0, 1}, {0}, 3},
    {"Transpose/4d", TRANSPOSE, 1, {S(4, 2, 3, 1, 2)}, {3, 1, 0, 2}, {0}, 4},
    {"Transpose/empty", TRANSPOSE, 1, {S(2, 0, 3)}, {1, 0}, {0}, 2},
    {"Concat/axis1",
     CONCAT,
     3,
     {S(2, 2, 1), S(2, 2, 3), S(2, 2, 2)},
     {1},
     {0},
     0},
    {"Concat/axis-2 with empty",
     CONCAT,
     3,
     {S(2, 1, 3), S(2, 0, 3), S(2, 2, 3)},
     {-2},
     {0},
     0},
    {"Split/sizes", SPLIT, 1, {S(2, 3, 5)}, {2, -1, 1}, {1}, 0},
    {"Split/empty piece", SPLIT, 1, {S(2, 4, 2)}, {1, 3, 0}, {0}, 0},
    {"Slice", SLICE, 1, {S(3, 3, 4, 1)}, {1, 0, 0}, {-1, 2, 1}, 3},
    {"Slice/empty", SLICE, 1, {S(2, 3, 2)}, {1, 1}, {0, 1}, 2},
    {"ExpandDims", EXPAND, 1, {S(2, 2, 3)}, {-1}, {0}, 0},
    {"Squeeze", SQUEEZE, 1, {S(3, 1, 3, 1)}, {0, 2}, {0}, 2},
    {"Squeeze/all", SQUEEZE, 1, {S(3, 1, 3, 1)}, {0}, {0}, 0},
    {"Pad", PAD, 1, {S(2, 2, 3)}, {1, 0, 2, 1}, {0}, 4},
    {"Pad/size-1 and empty",
     PAD,
     1,
     {S(3, 1, 0, 2)},
     {0, 1, 1, 1, 0, 0},
     {0},
     6},
    /* more padding than the input has elements along a dim, and a dim of
     * size 1 padded on both sides */
    {"Pad/wider than the input", PAD, 1, {S(2, 1, 2)}, {3, 4, 0, 5}, {0}, 4},
    {"Tile", TILE, 1, {S(3, 2, 1, 3)}, {2, 3, 1}, {0}, 3},
    {"Tile/zero multiple", TILE, 1, {S(2, 2, 2)}, {0, 2}, {0}, 2},
    {"Tile/size-1 dims", TILE, 1, {S(3, 1, 2, 1)}, {3, 1, 4}, {0}, 3},
};

static void test_first_order(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(11);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int unknown = 0; unknown < 2; unknown++)
      check(&cases[i], unknown, false, &rng);
}

static void test_second_order(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(12);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int unknown = 0; unknown < 2; unknown++)
      check(&cases[i], unknown, true, &rng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_order),
      cmocka_unit_test(test_second_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
