/* tests/test_layer_norm.c - LayerNorm over the last axis against a float64
 * reference here, for every float dtype; the gradients for x, gamma and
 * beta against central finite differences in float64 (a size-1 last axis,
 * a 3-D input, an unknown shape); an empty batch; the JSON round trip; a
 * second-order gradient refused; the errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/graph_io.h"
#include "testutil.h"

/* y[r, j] for x of n elements with last dim c. */
static void ln_ref(const rf_tensor *x, const rf_tensor *gm, const rf_tensor *bt,
                   int64_t c, double eps, double *y) {
  int64_t n = rf_tensor_num_elements(x);
  for (int64_t r = 0; r < n / c; r++) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < c; j++) m += rf_tensor_get(x, r * c + j);
    m /= c;
    for (int64_t j = 0; j < c; j++) {
      double d = rf_tensor_get(x, r * c + j) - m;
      v += d * d;
    }
    v /= c;
    for (int64_t j = 0; j < c; j++)
      y[r * c + j] = (rf_tensor_get(x, r * c + j) - m) / sqrt(v + eps) *
                         rf_tensor_get(gm, j) +
                     rf_tensor_get(bt, j);
  }
}

static void test_values(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(51);
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  const rf_shape shapes[] = {rf_shape_of(2, 5, 7), rf_shape_of(3, 2, 3, 9),
                             rf_shape_of(2, 4, 1), rf_shape_of(1, 33)};
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < 4; k++) {
      rf_shape s = shapes[k];
      int64_t c = s.dims[s.rank - 1];
      rf_shape cs = rf_shape_of(1, c);
      rf_tensor *x = rf_test_random_tensor(&rng, dts[d], s, -3, 5);
      rf_tensor *gm = rf_test_random_tensor(&rng, dts[d], cs, 0.5, 2);
      rf_tensor *bt = rf_test_random_tensor(&rng, dts[d], cs, -1, 1);
      rf_graph *g = rf_graph_new();
      rf_output px = rf_placeholder(g, "x", dts[d], s);
      rf_output y = rf_layer_norm(g, "ln", px, rf_const(g, NULL, gm),
                                  rf_const(g, NULL, bt), 1e-5);
      assert_graph_ok(g);
      rf_feed f = {px, x};
      rf_tensor *out;
      rf_test_run(g, 1, &f, 1, &y, 1, &out);
      double want[64];
      ln_ref(x, gm, bt, c, 1e-5, want);
      /* a rounded input's normalised value is exact up to its own rounding */
      assert_tensor_near(
          out, s, want,
          dts[d] == RF_FLOAT64 ? 1e-12 : 4 * rf_test_tolerance(dts[d]));
      rf_tensor_release(out);
      rf_tensor_release(x);
      rf_tensor_release(gm);
      rf_tensor_release(bt);
      rf_graph_free(g);
    }
}

/* l = sum(layer_norm(x, gamma, beta) * r); d l / d {x, gamma, beta} against
 * central finite differences of l. */
static void check_fd(rf_shape s, bool unknown, uint64_t *rng) {
  int64_t c = s.dims[s.rank - 1];
  rf_shape cs = rf_shape_of(1, c);
  rf_graph *g = rf_graph_new();
  rf_output in[3] = {
      rf_placeholder(g, "x", RF_FLOAT64, unknown ? rf_shape_unknown() : s),
      rf_placeholder(g, "gamma", RF_FLOAT64, unknown ? rf_shape_unknown() : cs),
      rf_placeholder(g, "beta", RF_FLOAT64, unknown ? rf_shape_unknown() : cs)};
  rf_feed f[3] = {{in[0], rf_test_random_tensor(rng, RF_FLOAT64, s, -3, 3)},
                  {in[1], rf_test_random_tensor(rng, RF_FLOAT64, cs, 0.5, 2)},
                  {in[2], rf_test_random_tensor(rng, RF_FLOAT64, cs, -1, 1)}};
  rf_output fx = rf_layer_norm(g, NULL, in[0], in[1], in[2], 0.01);
  assert_graph_ok(g);
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64, s, -1, 1);
  rf_output y = rf_sum(g, NULL, rf_mul(g, NULL, fx, rf_const(g, NULL, r)), NULL,
                       -1, false);
  rf_tensor_release(r);
  rf_output dx[3];
  assert_ok(rf_gradients(g, &y, 1, in, 3, NULL, dx));
  rf_session *sess = rf_test_cpu_session(g, 2);
  rf_tensor *got[3];
  assert_ok(rf_session_run(sess, f, 3, dx, 3, NULL, 0, got));
  for (int k = 0; k < 3; k++) {
    rf_tensor *orig = f[k].value;
    rf_shape ks = rf_tensor_shape(orig);
    for (int64_t i = 0; i < rf_tensor_num_elements(orig); i++) {
      double v[2];
      for (int side = 0; side < 2; side++) {
        rf_tensor *p, *o;
        assert_ok(
            rf_tensor_new_copy(RF_FLOAT64, &ks, rf_tensor_data(orig), &p));
        ((double *)rf_tensor_mutable_data(p))[i] += side ? -1e-6 : 1e-6;
        f[k].value = p;
        assert_ok(rf_session_run(sess, f, 3, &y, 1, NULL, 0, &o));
        v[side] = rf_tensor_get(o, 0);
        rf_tensor_release(o);
        rf_tensor_release(p);
      }
      f[k].value = orig;
      double want = (v[0] - v[1]) / 2e-6, have = rf_tensor_get(got[k], i);
      if (!(fabs(have - want) <= 1e-6 * fmax(1, fabs(want)))) {
        char ss[64];
        rf_shape_format(&s, ss, sizeof ss);
        fail_msg("x %s%s: d%s[%lld]: finite difference %.12g, gradient %.12g",
                 ss, unknown ? " (unknown shape)" : "",
                 k == 0   ? "x"
                 : k == 1 ? "gamma"
                          : "beta",
                 (long long)i, want, have);
      }
    }
  }
  for (int k = 0; k < 3; k++) {
    rf_tensor_release(got[k]);
    rf_tensor_release(f[k].value);
  }
  rf_session_free(sess);
  rf_graph_free(g);
}

static void test_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(52);
  check_fd(rf_shape_of(2, 3, 4), false, &rng);
  check_fd(rf_shape_of(2, 3, 4), true, &rng);
  check_fd(rf_shape_of(3, 2, 3, 5), false, &rng);
  check_fd(rf_shape_of(2, 4, 1), false, &rng);
  check_fd(rf_shape_of(1, 6), true, &rng);
  /* random shapes */
  for (int t = 0; t < 4; t++) {
    int rank = 1 + (int)(rf_test_rand(&rng) % 3);
    int64_t d[3];
    for (int i = 0; i < rank; i++) d[i] = 1 + (int64_t)(rf_test_rand(&rng) % 5);
    rf_shape s = rank == 1   ? rf_shape_of(1, d[0])
                 : rank == 2 ? rf_shape_of(2, d[0], d[1])
                             : rf_shape_of(3, d[0], d[1], d[2]);
    check_fd(s, t % 2, &rng);
  }
}

/* rows = 0: y and dx empty, dgamma and dbeta zeros of shape [C]. */
static void test_empty_batch(void **state) {
  (void)state;
  rf_shape s = rf_shape_of(3, 0, 2, 3), cs = rf_shape_of(1, 3);
  uint64_t rng = rf_test_rng(53);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, s);
  rf_output gm = rf_placeholder(g, "g", RF_FLOAT32, cs);
  rf_output bt = rf_placeholder(g, "b", RF_FLOAT32, cs);
  rf_output y = rf_layer_norm(g, NULL, x, gm, bt, 1e-5);
  rf_output l = rf_sum(g, NULL, y, NULL, -1, false);
  rf_output in[3] = {x, gm, bt}, d[3];
  assert_ok(rf_gradients(g, &l, 1, in, 3, NULL, d));
  rf_output fetch[4] = {y, d[0], d[1], d[2]};
  rf_feed f[3] = {{x, rf_test_random_tensor(&rng, RF_FLOAT32, s, 1, 2)},
                  {gm, rf_test_random_tensor(&rng, RF_FLOAT32, cs, 1, 2)},
                  {bt, rf_test_random_tensor(&rng, RF_FLOAT32, cs, 1, 2)}};
  rf_tensor *out[4];
  rf_test_run(g, 1, f, 3, fetch, 4, out);
  double zeros[3] = {0, 0, 0};
  assert_tensor_near(out[0], s, zeros, 0);
  assert_tensor_near(out[1], s, zeros, 0);
  assert_tensor_near(out[2], cs, zeros, 0);
  assert_tensor_near(out[3], cs, zeros, 0);
  for (int i = 0; i < 4; i++) rf_tensor_release(out[i]);
  for (int i = 0; i < 3; i++) rf_tensor_release(f[i].value);
  rf_graph_free(g);
}

/* Rows of equal values with epsilon 0 (C == 1, and C == 3 with every value
 * alike): xhat is 0, so y is beta and dx is 0, dgamma 0 and dbeta the
 * column sums of dy (1 each here): never NaN. */
static void test_zero_variance_with_epsilon_0(void **state) {
  (void)state;
  for (int c = 1; c <= 3; c += 2) {
    rf_shape s = rf_shape_of(2, 2, c), cs = rf_shape_of(1, c);
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "x", RF_FLOAT32, s);
    rf_output gm = rf_placeholder(g, "g", RF_FLOAT32, cs);
    rf_output bt = rf_placeholder(g, "b", RF_FLOAT32, cs);
    rf_output y = rf_layer_norm(g, NULL, x, gm, bt, 0.0);
    rf_output l = rf_sum(g, NULL, y, NULL, -1, false);
    rf_output in[3] = {x, gm, bt}, d[3];
    assert_ok(rf_gradients(g, &l, 1, in, 3, NULL, d));
    float xv[6] = {5, 5, 5, -2, -2, -2}, gv[3] = {2, 3, 4}, bv[3] = {7, 8, 9};
    rf_tensor *tx, *tg, *tb;
    assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, xv, &tx));
    assert_ok(rf_tensor_new_copy(RF_FLOAT32, &cs, gv, &tg));
    assert_ok(rf_tensor_new_copy(RF_FLOAT32, &cs, bv, &tb));
    rf_feed f[3] = {{x, tx}, {gm, tg}, {bt, tb}};
    rf_output fetch[4] = {y, d[0], d[1], d[2]};
    rf_tensor *out[4];
    rf_test_run(g, 1, f, 3, fetch, 4, out);
    double wy[6], zeros[6] = {0}, twos[3] = {2, 2, 2};
    for (int r = 0; r < 2; r++)
      for (int j = 0; j < c; j++) wy[r * c + j] = bv[j];
    assert_tensor_near(out[0], s, wy, 0);
    assert_tensor_near(out[1], s, zeros, 0);
    assert_tensor_near(out[2], cs, zeros, 0);
    assert_tensor_near(out[3], cs, twos, 0);
    for (int i = 0; i < 4; i++) rf_tensor_release(out[i]);
    for (int i = 0; i < 3; i++) rf_tensor_release(f[i].value);
    rf_graph_free(g);
  }
}

/* Saved and loaded, the graph keeps epsilon and gives the same values. */
static void test_json_round_trip(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(54);
  rf_shape s = rf_shape_of(2, 3, 4), cs = rf_shape_of(1, 4);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, s);
  rf_tensor *gm = rf_test_random_tensor(&rng, RF_FLOAT64, cs, 0.5, 2);
  rf_tensor *bt = rf_test_random_tensor(&rng, RF_FLOAT64, cs, -1, 1);
  rf_layer_norm(g, "ln", x, rf_const(g, "gm", gm), rf_const(g, "bt", bt), 0.5);
  assert_graph_ok(g);
  char *json;
  assert_ok(rf_graph_to_json(g, &json));
  rf_graph *h;
  assert_ok(rf_graph_from_json(json, strlen(json), &h));
  rf_string_free(json);
  rf_node *n = rf_graph_find_node(h, "ln");
  assert_non_null(n);
  double eps;
  assert_ok(rf_node_attr_float(n, "epsilon", &eps));
  assert_true(eps == 0.5);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, s, -2, 2);
  rf_feed f = {{rf_graph_find_node(h, "x"), 0}, xv};
  rf_output y = {n, 0};
  rf_tensor *out;
  rf_test_run(h, 1, &f, 1, &y, 1, &out);
  double want[12];
  ln_ref(xv, gm, bt, 4, 0.5, want);
  assert_tensor_near(out, s, want, 1e-12);
  rf_tensor_release(out);
  rf_tensor_release(xv);
  rf_tensor_release(gm);
  rf_tensor_release(bt);
  rf_graph_free(h);
  rf_graph_free(g);
}

/* _LayerNormGrad has no gradient: a second order is refused, not zero. */
static void test_second_order_refused(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(2, 2, 3));
  rf_output c = rf_placeholder(g, "c", RF_FLOAT64, rf_shape_of(1, 3));
  rf_output y = rf_layer_norm(g, NULL, x, c, c, 1e-5);
  rf_output l = rf_sum(g, NULL, rf_mul(g, NULL, y, y), NULL, -1, false), dx;
  assert_ok(rf_gradients(g, &l, 1, &x, 1, NULL, &dx));
  rf_output l2 = rf_sum(g, NULL, dx, NULL, -1, false), d2;
  rf_status *st = rf_gradients(g, &l2, 1, &x, 1, NULL, &d2);
  assert_non_null(st);
  if (!strstr(rf_status_message(st), "_LayerNormGrad"))
    fail_msg("\"%s\" does not name _LayerNormGrad", rf_status_message(st));
  rf_status_free(st);
  rf_graph_free(g);
}

static void test_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 2, 3));
  rf_output c3 = rf_placeholder(g, "c3", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output c4 = rf_placeholder(g, "c4", RF_FLOAT32, rf_shape_of(1, 4));
  rf_output m = rf_placeholder(g, "m", RF_FLOAT32, rf_shape_of(2, 1, 3));
  rf_output s = rf_placeholder(g, "s", RF_FLOAT32, rf_shape_of(0));
  rf_output i = rf_placeholder(g, "i", RF_INT32, rf_shape_of(2, 2, 3));
  assert_null(rf_layer_norm(g, "bad", x, c4, c3, 1e-5).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "gamma (4)");
  rf_status *st = rf_graph_status(g);
  assert_non_null(strstr(rf_status_message(st), "'bad' (LayerNorm)"));
  rf_status_free(st);
  rf_graph_clear_status(g);
  assert_null(rf_layer_norm(g, NULL, x, c3, m, 1e-5).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "beta (1, 3)");
  rf_graph_clear_status(g);
  assert_null(rf_layer_norm(g, NULL, s, c3, c3, 1e-5).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "rank >= 1");
  rf_graph_clear_status(g);
  assert_null(rf_layer_norm(g, NULL, x, c3, c3, -1).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "epsilon -1");
  rf_graph_clear_status(g);
  rf_output ic = rf_placeholder(g, "ic", RF_INT32, rf_shape_of(1, 3));
  assert_null(rf_layer_norm(g, NULL, i, ic, ic, 1e-5).node);
  st = rf_graph_status(g);
  assert_non_null(st);
  rf_status_free(st);
  rf_graph_clear_status(g);
  /* gamma's shape only known when run: the kernel refuses it */
  rf_output u = rf_placeholder(g, "u", RF_FLOAT32, rf_shape_unknown());
  rf_output y = rf_layer_norm(g, NULL, x, u, c3, 1e-5);
  assert_graph_ok(g);
  rf_session *sess = rf_test_cpu_session(g, 1);
  rf_tensor *xv, *uv, *cv, *out = NULL;
  rf_shape xs = rf_shape_of(2, 2, 3), us = rf_shape_of(1, 2),
           cs = rf_shape_of(1, 3);
  uint64_t rng = rf_test_rng(55);
  xv = rf_test_random_tensor(&rng, RF_FLOAT32, xs, -1, 1);
  uv = rf_test_random_tensor(&rng, RF_FLOAT32, us, -1, 1);
  cv = rf_test_random_tensor(&rng, RF_FLOAT32, cs, -1, 1);
  rf_feed f[3] = {{x, xv}, {u, uv}, {c3, cv}};
  st = rf_session_run(sess, f, 3, &y, 1, NULL, 0, &out);
  assert_status(st, RF_INVALID_ARGUMENT, "gamma is not [C]");
  rf_tensor_release(xv);
  rf_tensor_release(uv);
  rf_tensor_release(cv);
  rf_session_free(sess);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_gradients),
      cmocka_unit_test(test_empty_batch),
      cmocka_unit_test(test_zero_variance_with_epsilon_0),
      cmocka_unit_test(test_json_round_trip),
      cmocka_unit_test(test_second_order_refused),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
