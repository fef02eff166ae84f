/* tests/test_collective_integer_grad.c - an integer all-reduce that no
 * gradient flows into (it is reached from x only through an integer cast)
 * gets no gradient and no error, as a Cast to an integer passes none:
 * - the gradient of a max/min all-reduce's gradient (its #winner helper is
 *   an int32 all-reduce of which x decides the input), on 2 and 3 devices in
 *   unusual orders, against float64 second derivatives computed here;
 * - a float input cast to int32, all-reduced and cast back into the loss.
 * An integer all-reduce that a gradient does reach still has none ("No
 * gradient defined for AllReduce of int32"). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "testutil.h"

#define N 5 /* elements per device */

static void dev(int d, char *buf) { snprintf(buf, 16, "cpu:%d", d); }

/* f_i(x) on participant i: x*x, tanh(x), sigmoid(x) - their values, first
 * and second derivatives at v. */
static void branch(int i, double v, double *f, double *df, double *d2f) {
  if (i == 0) {
    *f = v * v;
    *df = 2 * v;
    *d2f = 2;
  } else if (i == 1) {
    double t = tanh(v);
    *f = t;
    *df = 1 - t * t;
    *d2f = -2 * t * (1 - t * t);
  } else {
    double s = 1 / (1 + exp(-v));
    *f = s;
    *df = s * (1 - s);
    *d2f = s * (1 - s) * (1 - 2 * s);
  }
}

/* x on the first device feeds participant i through f_i; y = all-reduce
 * (max or min) on n devices; L = sum over devices of sum(y^2); g1 = dL/dx
 * (one construction), g2 = d(sum(g1))/dx (a second). */
static void second_order(rf_reduction red, int n, const int *devices) {
  uint64_t rng = rf_test_rng((uint64_t)(red * 10 + n));
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)N);
  char d[16];
  dev(devices[0], d);
  assert_ok(rf_graph_push_device(g, d));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, s);
  rf_graph_pop_device(g);
  rf_output in[3], y[3], l[3];
  for (int i = 0; i < n; i++) {
    dev(devices[i], d);
    assert_ok(rf_graph_push_device(g, d));
    in[i] = i == 0   ? rf_mul(g, NULL, x, x)
            : i == 1 ? rf_tanh(g, NULL, x)
                     : rf_sigmoid(g, NULL, x);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", in, n, red, y);
  for (int i = 0; i < n; i++) {
    dev(devices[i], d);
    assert_ok(rf_graph_push_device(g, d));
    l[i] = rf_sum(g, NULL, rf_mul(g, NULL, y[i], y[i]), NULL, -1, false);
    rf_graph_pop_device(g);
  }
  rf_output g1, g2;
  assert_ok(rf_gradients(g, l, n, &x, 1, NULL, &g1));
  rf_output s1 = rf_sum(g, NULL, g1, NULL, -1, false);
  assert_ok(rf_gradients(g, &s1, 1, &x, 1, NULL, &g2));
  assert_graph_ok(g);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, s, -1.5, 1.5);
  rf_feed feed = {x, xv};
  rf_output fetch[2] = {g1, g2};
  rf_tensor *out[2];
  rf_test_run(g, 3, &feed, 1, fetch, 2, out);
  double want1[N], want2[N];
  for (int e = 0; e < N; e++) {
    double v = rf_tensor_get(xv, e), m = 0, dm = 0, d2m = 0;
    for (int i = 0; i < n; i++) {
      double f, df, d2f;
      branch(i, v, &f, &df, &d2f);
      bool better = red == RF_REDUCE_MAX ? f > m : f < m;
      if (i == 0 || better) m = f, dm = df, d2m = d2f;
    }
    /* L = n m^2: dL/dx = 2 n m m'; d/dx of that = 2 n (m'^2 + m m'') */
    want1[e] = 2 * n * m * dm;
    want2[e] = 2 * n * (dm * dm + m * d2m);
  }
  assert_tensor_near(out[0], s, want1, 1e-12);
  assert_tensor_near(out[1], s, want2, 1e-12);
  for (int i = 0; i < 2; i++) rf_tensor_release(out[i]);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

static void test_gradient_of_max_min_gradient(void **state) {
  (void)state;
  static const int two[] = {1, 0}, three[] = {2, 0, 1};
  second_order(RF_REDUCE_MAX, 2, two);
  second_order(RF_REDUCE_MIN, 2, two);
  second_order(RF_REDUCE_MAX, 3, three);
  second_order(RF_REDUCE_MIN, 3, three);
}

/* L_i = sum(float(all-reduce max of int32(x_i))) + sum(x_i^2): only the
 * second term has a gradient, 2 x_i. */
static void test_integer_all_reduce_through_casts(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(7);
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)N);
  rf_output x[2], c[2], y[2], l[2], dx[2];
  for (int i = 0; i < 2; i++) {
    assert_ok(rf_graph_push_device(g, i ? "cpu:0" : "cpu:1"));
    x[i] = rf_placeholder(g, NULL, RF_FLOAT32, s);
    c[i] = rf_cast(g, NULL, x[i], RF_INT32);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "count", c, 2, RF_REDUCE_MAX, y);
  for (int i = 0; i < 2; i++) {
    assert_ok(rf_graph_push_device(g, i ? "cpu:0" : "cpu:1"));
    rf_output yf = rf_cast(g, NULL, y[i], RF_FLOAT32);
    rf_output sq = rf_mul(g, NULL, x[i], x[i]);
    l[i] = rf_add(g, NULL, rf_sum(g, NULL, yf, NULL, -1, false),
                  rf_sum(g, NULL, sq, NULL, -1, false));
    rf_graph_pop_device(g);
  }
  assert_ok(rf_gradients(g, l, 2, x, 2, NULL, dx));
  assert_graph_ok(g);
  rf_tensor *in[2];
  rf_feed feeds[2];
  for (int i = 0; i < 2; i++) {
    in[i] = rf_test_random_tensor(&rng, RF_FLOAT32, s, -9, 9);
    feeds[i] = (rf_feed){x[i], in[i]};
  }
  rf_tensor *out[2];
  rf_test_run(g, 2, feeds, 2, dx, 2, out);
  for (int i = 0; i < 2; i++) {
    double want[N];
    for (int e = 0; e < N; e++) want[e] = 2 * rf_tensor_get(in[i], e);
    assert_tensor_near(out[i], s, want, 1e-6);
    rf_tensor_release(out[i]);
    rf_tensor_release(in[i]);
  }
  /* A gradient that reaches the integer all-reduce: still none. */
  rf_output yl[2];
  for (int i = 0; i < 2; i++) yl[i] = rf_sum(g, NULL, y[i], NULL, -1, false);
  assert_status(rf_gradients(g, yl, 2, c, 2, NULL, dx), RF_INVALID_ARGUMENT,
                "No gradient defined for AllReduce of int32");
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradient_of_max_min_gradient),
      cmocka_unit_test(test_integer_all_reduce_through_casts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
