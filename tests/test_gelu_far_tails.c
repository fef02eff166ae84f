/* tests/test_gelu_far_tails.c - GELU's first and second derivatives far out
 * in the tails, where the density is 0: float64 inputs up to +-1e300 (and
 * +-inf) give the limits (gelu' 1 on the right, 0 on the left; gelu'' 0),
 * never NaN. Before, x * x or du * du overflowed there and met a zero density
 * (0 * inf): NaN for |x| past ~1e154 (~1e103 for the tanh form's gelu''). */
#include <math.h>
#include <stdlib.h>

#include "testutil.h"

static const double far_x[] = {1e300,  -1e300, 1e160,    -1e160,   1e104,
                               -1e104, 1e40,   -1e40,    40,       -40,
                               1e20,   -1e20,  INFINITY, -INFINITY};
#define NUM_FAR ((int)(sizeof far_x / sizeof far_x[0]))

/* gelu' (order 1) or gelu'' (order 2) of far_x, through rf_gradients of
 * sum(gelu(x)) (and of that gradient's sum). */
static rf_tensor *derivative(bool approx, int order) {
  rf_shape s = rf_shape_of(1, NUM_FAR);
  rf_tensor *x;
  assert_ok(rf_tensor_new_copy(RF_FLOAT64, &s, far_x, &x));
  rf_graph *g = rf_graph_new();
  rf_output px = rf_placeholder(g, "x", RF_FLOAT64, s);
  rf_output y = rf_sum(g, NULL, rf_gelu(g, NULL, px, approx), NULL, -1, false);
  rf_output d;
  assert_ok(rf_gradients(g, &y, 1, &px, 1, NULL, &d));
  if (order == 2) {
    rf_output sd = rf_sum(g, NULL, d, NULL, -1, false);
    assert_ok(rf_gradients(g, &sd, 1, &px, 1, NULL, &d));
  }
  assert_graph_ok(g);
  rf_feed f = {px, x};
  rf_tensor *out;
  rf_test_run(g, 1, &f, 1, &d, 1, &out);
  rf_graph_free(g);
  rf_tensor_release(x);
  return out;
}

static void test_far_tails(void **state) {
  (void)state;
  rf_shape s = rf_shape_of(1, NUM_FAR);
  double first[NUM_FAR], second[NUM_FAR];
  for (int i = 0; i < NUM_FAR; i++) {
    first[i] = far_x[i] > 0 ? 1 : 0;
    second[i] = 0;
  }
  for (int approx = 0; approx < 2; approx++) {
    rf_tensor *d1 = derivative(approx, 1), *d2 = derivative(approx, 2);
    assert_tensor_near(d1, s, first, 0.0);
    assert_tensor_near(d2, s, second, 0.0);
    rf_tensor_release(d1);
    rf_tensor_release(d2);
  }
}

/* Near the origin nothing changed: gelu'(0) = 0.5, gelu''(0) = 2 phi(0)
 * (exact) or 2 sqrt(2 / pi) / 2 (tanh form), and NaN stays NaN. */
static void test_center_and_nan(void **state) {
  (void)state;
  for (int approx = 0; approx < 2; approx++) {
    rf_shape s = rf_shape_of(1, 2);
    const double xs[2] = {0, NAN};
    rf_tensor *x;
    assert_ok(rf_tensor_new_copy(RF_FLOAT64, &s, xs, &x));
    rf_graph *g = rf_graph_new();
    rf_output px = rf_placeholder(g, "x", RF_FLOAT64, s);
    rf_output y =
        rf_sum(g, NULL, rf_gelu(g, NULL, px, approx), NULL, -1, false);
    rf_output d[2];
    assert_ok(rf_gradients(g, &y, 1, &px, 1, NULL, &d[0]));
    rf_output sd = rf_sum(g, NULL, d[0], NULL, -1, false);
    assert_ok(rf_gradients(g, &sd, 1, &px, 1, NULL, &d[1]));
    assert_graph_ok(g);
    rf_feed f = {px, x};
    rf_tensor *out[2];
    rf_test_run(g, 1, &f, 1, d, 2, out);
    assert_true(rf_tensor_get(out[0], 0) == 0.5);
    double want2 = approx ? sqrt(2 / M_PI) : 2 / sqrt(2 * M_PI);
    assert_true(fabs(rf_tensor_get(out[1], 0) - want2) < 1e-15);
    assert_true(isnan(rf_tensor_get(out[0], 1)));
    assert_true(isnan(rf_tensor_get(out[1], 1)));
    rf_tensor_release(out[0]);
    rf_tensor_release(out[1]);
    rf_tensor_release(x);
    rf_graph_free(g);
  }
}

int main(void) {
  rf_test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_far_tails),
      cmocka_unit_test(test_center_and_nan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
