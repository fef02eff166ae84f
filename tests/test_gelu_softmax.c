/* tests/test_gelu_softmax.c - GELU (exact and tanh-approximated) against
 * the formulas in float64 here, for every float dtype; its gradients of first
 * and second order against central finite differences (a third order is
 * refused, never silently zero); Softmax along any axis against a float64
 * reference, and its gradient; the errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static double gelu_ref(double x, bool approx) {
  if (approx)
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + erf(x / sqrt(2)));
}

static void test_gelu_values(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(41);
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  for (int d = 0; d < 4; d++)
    for (int approx = 0; approx < 2; approx++) {
      rf_shape s = rf_shape_of(2, 5, 7);
      rf_tensor *x = rf_test_random_tensor(&rng, dts[d], s, -5, 5);
      rf_graph *g = rf_graph_new();
      rf_output px = rf_placeholder(g, "x", dts[d], s);
      rf_output y = rf_gelu(g, NULL, px, approx);
      assert_graph_ok(g);
      rf_feed f = {px, x};
      rf_tensor *out;
      rf_test_run(g, 1, &f, 1, &y, 1, &out);
      double want[35];
      for (int i = 0; i < 35; i++)
        want[i] = gelu_ref(rf_tensor_get(x, i), approx);
      assert_tensor_near(
          out, s, want,
          dts[d] == RF_FLOAT64 ? 1e-14 : rf_test_tolerance(dts[d]));
      rf_tensor_release(out);
      rf_tensor_release(x);
      rf_graph_free(g);
    }
}

/* f(x) -> y = sum(f * r); every dy/dx element against finite differences. */
typedef rf_output (*build_fn)(rf_graph *g, rf_output x, int arg);

static void check_fd(build_fn build, int arg, rf_shape s, bool unknown,
                     const char *what, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output x =
      rf_placeholder(g, "x", RF_FLOAT64, unknown ? rf_shape_unknown() : s);
  rf_feed f = {x, rf_test_random_tensor(rng, RF_FLOAT64, s, -3, 3)};
  rf_output fx = build(g, x, arg);
  assert_graph_ok(g);
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64, s, -1, 1);
  rf_output y = rf_sum(g, NULL, rf_mul(g, NULL, fx, rf_const(g, NULL, r)), NULL,
                       -1, false);
  rf_tensor_release(r);
  rf_output dx;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  rf_session *sess = rf_test_cpu_session(g, 1);
  rf_tensor *got;
  assert_ok(rf_session_run(sess, &f, 1, &dx, 1, NULL, 0, &got));
  rf_tensor *orig = f.value;
  for (int64_t i = 0; i < rf_tensor_num_elements(orig); i++) {
    double v[2];
    for (int side = 0; side < 2; side++) {
      rf_tensor *p, *o;
      assert_ok(rf_tensor_new_copy(RF_FLOAT64, &s, rf_tensor_data(orig), &p));
      ((double *)rf_tensor_mutable_data(p))[i] += side ? -1e-6 : 1e-6;
      f.value = p;
      assert_ok(rf_session_run(sess, &f, 1, &y, 1, NULL, 0, &o));
      v[side] = rf_tensor_get(o, 0);
      rf_tensor_release(o);
      rf_tensor_release(p);
    }
    f.value = orig;
    double want = (v[0] - v[1]) / 2e-6, have = rf_tensor_get(got, i);
    if (!(fabs(have - want) <= 1e-6 * fmax(1, fabs(want))))
      fail_msg("%s%s: dx[%lld]: finite difference %.12g, gradient %.12g", what,
               unknown ? " (unknown shape)" : "", (long long)i, want, have);
  }
  rf_tensor_release(got);
  rf_tensor_release(orig);
  rf_session_free(sess);
  rf_graph_free(g);
}

static rf_output gelu1(rf_graph *g, rf_output x, int approx) {
  return rf_gelu(g, NULL, x, approx);
}

/* d sum(gelu(x)^2) / dx: goes through _GeluGrad's gradient. */
static rf_output gelu2(rf_graph *g, rf_output x, int approx) {
  rf_output y = rf_gelu(g, NULL, x, approx);
  rf_output l = rf_sum(g, NULL, rf_mul(g, NULL, y, y), NULL, -1, false);
  rf_output dx;
  assert_ok(rf_gradients(g, &l, 1, &x, 1, NULL, &dx));
  return dx;
}

static rf_output softmax_ax(rf_graph *g, rf_output x, int axis) {
  return rf_softmax_axis(g, NULL, x, axis);
}

static void test_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(42);
  rf_shape s = rf_shape_of(2, 3, 4);
  for (int approx = 0; approx < 2; approx++)
    for (int unknown = 0; unknown < 2; unknown++) {
      check_fd(gelu1, approx, s, unknown, approx ? "gelu tanh" : "gelu erf",
               &rng);
      check_fd(gelu2, approx, s, unknown,
               approx ? "gelu tanh second order" : "gelu erf second order",
               &rng);
    }
  /* size-1 dims and a single element */
  const rf_shape small[] = {rf_shape_of(2, 1, 5), rf_shape_of(3, 3, 1, 1),
                            rf_shape_of(1, 1)};
  for (int k = 0; k < 3; k++)
    for (int approx = 0; approx < 2; approx++) {
      check_fd(gelu1, approx, small[k], k == 1, "gelu size-1 dims", &rng);
      check_fd(gelu2, approx, small[k], false, "gelu size-1 second order",
               &rng);
    }
  rf_shape s3 = rf_shape_of(3, 2, 3, 4);
  for (int axis = -3; axis < 3; axis++) {
    char what[48];
    snprintf(what, sizeof what, "softmax axis %d", axis);
    check_fd(softmax_ax, axis, s3, false, what, &rng);
  }
  /* an axis of size 1 (softmax 1, gradient 0) and axes beside size-1 dims */
  rf_shape s1 = rf_shape_of(4, 2, 1, 3, 1);
  for (int axis = -4; axis < 4; axis++) {
    char what[48];
    snprintf(what, sizeof what, "softmax size-1 dims axis %d", axis);
    check_fd(softmax_ax, axis, s1, false, what, &rng);
  }
}

/* gelu'' (_GeluSecond, which second-order gradients use) has no gradient:
 * asking for one is refused, never silently zero. */
static void test_third_order_refused(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(1, 3));
  rf_node_builder *b = rf_node_builder_new(g, "_GeluSecond", NULL);
  rf_node_builder_input(b, x);
  rf_node *n;
  assert_ok(rf_node_builder_finish(b, &n));
  rf_output l = rf_sum(g, NULL, (rf_output){n, 0}, NULL, -1, false);
  rf_output d3;
  rf_status *st = rf_gradients(g, &l, 1, &x, 1, NULL, &d3);
  assert_non_null(st);
  if (!strstr(rf_status_message(st), "_GeluSecond"))
    fail_msg("\"%s\" does not name _GeluSecond", rf_status_message(st));
  rf_status_free(st);
  rf_graph_free(g);
}

static void test_softmax_axis_values(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(43);
  rf_shape s = rf_shape_of(3, 2, 3, 4);
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT32, s, -4, 4);
  for (int axis = -3; axis < 3; axis++) {
    rf_graph *g = rf_graph_new();
    rf_output px = rf_placeholder(g, "x", RF_FLOAT32, s);
    rf_output y = rf_softmax_axis(g, "sm", px, axis);
    assert_graph_ok(g);
    assert_string_equal(rf_node_name(y.node), "sm");
    rf_feed f = {px, x};
    rf_tensor *out;
    rf_test_run(g, 1, &f, 1, &y, 1, &out);
    int a = axis < 0 ? axis + 3 : axis;
    double want[24];
    for (int i = 0; i < 24; i++) {
      int idx[3] = {i / 12, (i / 4) % 3, i % 4}, step[3] = {12, 4, 1};
      double sum = 0, mine = exp(rf_tensor_get(x, i));
      for (int j = 0; j < (int)s.dims[a]; j++)
        sum += exp(rf_tensor_get(x, i + (j - idx[a]) * step[a]));
      want[i] = mine / sum;
    }
    assert_tensor_near(out, s, want, 1e-6);
    rf_tensor_release(out);
    rf_graph_free(g);
  }
  rf_tensor_release(x);
}

static void test_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output i = rf_placeholder(g, "i", RF_INT32, rf_shape_of(1, 3));
  assert_null(rf_gelu(g, "bad", i, false).node);
  rf_status *st = rf_graph_status(g);
  assert_non_null(strstr(rf_status_message(st), "'bad' (Gelu)"));
  rf_status_free(st);
  rf_graph_clear_status(g);
  rf_output u = rf_placeholder(g, "u", RF_FLOAT32, rf_shape_unknown());
  assert_null(rf_softmax_axis(g, NULL, u, 0).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "rank known");
  rf_graph_clear_status(g);
  rf_output v = rf_placeholder(g, "v", RF_FLOAT32, rf_shape_of(2, 2, 3));
  assert_null(rf_softmax_axis(g, NULL, v, 2).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "axis 2");
  rf_graph_clear_status(g);
  /* A refused softmax on another axis names the node as given and leaves
   * nothing behind (its transposes): a bad dtype, a name in use. */
  int before = rf_graph_num_nodes(g);
  rf_output i3 = rf_placeholder(g, "i3", RF_INT32, rf_shape_of(2, 3, 4));
  before++;
  assert_null(rf_softmax_axis(g, "my_softmax", i3, 0).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'my_softmax' (Softmax): attr 'T' is int32");
  assert_int_equal(rf_graph_num_nodes(g), before);
  rf_graph_clear_status(g);
  rf_output f3 = rf_placeholder(g, "f3", RF_FLOAT32, rf_shape_of(2, 3, 4));
  before++;
  assert_null(rf_softmax_axis(g, "v", f3, 0).node); /* 'v' is taken */
  assert_status(rf_graph_status(g), RF_ALREADY_EXISTS, "'v'");
  assert_int_equal(rf_graph_num_nodes(g), before);
  rf_graph_clear_status(g);
  assert_non_null(rf_softmax_axis(g, "fresh", f3, 0).node);
  assert_graph_ok(g);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gelu_values),
      cmocka_unit_test(test_gradients),
      cmocka_unit_test(test_third_order_refused),
      cmocka_unit_test(test_softmax_axis_values),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
