/* tests/test_dropout.c - Dropout's stateless generator: Philox4x32-10
 * against the Random123 known-answer vectors; every element kept or dropped
 * exactly as the documented key (seed, step, device, index) says, checked by
 * recomputing it here; the same decisions again for the same (seed, step,
 * device) and others for another step, device or seed; the kept fraction
 * near 1 - rate; the gradient dy * mask (and its finite differences); the
 * errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/philox.h"
#include "testutil.h"

static void test_philox_known_answers(void **state) {
  (void)state;
  /* Random123's kat_vectors for philox4x32_10. */
  static const uint32_t in[3][6] = {
      {0, 0, 0, 0, 0, 0},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0}};
  static const uint32_t out[3][4] = {
      {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int t = 0; t < 3; t++) {
    uint32_t c[4] = {in[t][0], in[t][1], in[t][2], in[t][3]};
    rf__philox4x32(c, in[t][4], in[t][5]);
    for (int i = 0; i < 4; i++) assert_int_equal(c[i], out[t][i]);
  }
}

/* The documented decision, recomputed from the Philox words here. */
static bool keep_ref(uint64_t seed, int64_t step, int device, int64_t i,
                     double rate) {
  uint64_t g = (uint64_t)i / 4;
  uint32_t c[4] = {
      (uint32_t)g, (uint32_t)(g >> 32), (uint32_t)step,
      (uint32_t)(((uint64_t)step >> 32) & 0xFFFFFF) | ((uint32_t)device << 24)};
  rf__philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  return (c[i % 4] >> 8) / 16777216.0 >= rate;
}

/* Runs dropout of x (float32, n elements) on device `dev` of a 2-device
 * session `runs` times; checks each run against the reference at steps
 * 1..runs; returns the kept count of the last run. */
static int64_t check_runs(uint64_t seed, double rate, int dev, int runs,
                          uint64_t *rng) {
  const int64_t n = 4099;
  rf_graph *g = rf_graph_new();
  char device[16];
  snprintf(device, sizeof device, "cpu:%d", dev);
  assert_ok(rf_graph_push_device(g, device));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, n));
  rf_output y = rf_dropout(g, "drop", x, rate, (int64_t)seed);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_tensor *tx =
      rf_test_random_tensor(rng, RF_FLOAT32, rf_shape_of(1, n), 0.5, 2);
  rf_feed f = {x, tx};
  rf_session *s = rf_test_cpu_session(g, 2);
  rf_output fetch[2] = {y, {y.node, 1}};
  int64_t kept = 0;
  for (int step = 1; step <= runs; step++) {
    rf_tensor *got[2];
    assert_ok(rf_session_run(s, &f, 1, fetch, 2, NULL, 0, got));
    kept = 0;
    float scale = (float)(1.0 / (1.0 - rate));
    for (int64_t i = 0; i < n; i++) {
      bool k = keep_ref(seed, step, dev, i, rate);
      kept += k;
      float want_m = k ? scale : 0.0f;
      /* the kernel multiplies in double and rounds once */
      float want_y = (float)((k ? 1.0 / (1.0 - rate) : 0.0) *
                             (double)((const float *)rf_tensor_data(tx))[i]);
      float have_m = ((const float *)rf_tensor_data(got[1]))[i];
      float have_y = ((const float *)rf_tensor_data(got[0]))[i];
      if (have_m != want_m || have_y != want_y)
        fail_msg("step %d device %d element %lld: mask %g y %g, want %g %g",
                 step, dev, (long long)i, have_m, have_y, want_m, want_y);
    }
    rf_tensor_release(got[0]);
    rf_tensor_release(got[1]);
  }
  rf_session_free(s);
  rf_tensor_release(tx);
  rf_graph_free(g);
  return kept;
}

static void test_decisions_match_the_documented_key(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(51);
  uint64_t seed = rf_test_rand(&rng);
  for (int dev = 0; dev < 2; dev++) {
    int64_t kept = check_runs(seed, 0.3, dev, 3, &rng);
    /* kept ~ Binomial(4099, 0.7): sd ~ 29; 6 sd either side */
    assert_true(kept > 4099 * 0.7 - 175 && kept < 4099 * 0.7 + 175);
  }
  assert_int_equal(check_runs(seed, 0.0, 0, 1, &rng), 4099); /* rate 0 */
  /* Another step, device or seed decides otherwise (for some element). */
  int diff_step = 0, diff_dev = 0, diff_seed = 0;
  for (int64_t i = 0; i < 256; i++) {
    bool k = keep_ref(seed, 1, 0, i, 0.5);
    diff_step += k != keep_ref(seed, 2, 0, i, 0.5);
    diff_dev += k != keep_ref(seed, 1, 1, i, 0.5);
    diff_seed += k != keep_ref(seed + 1, 1, 0, i, 0.5);
  }
  assert_true(diff_step > 0 && diff_dev > 0 && diff_seed > 0);
}

/* d sum(dropout(x) * r) / dx = mask * r, and finite differences agree
 * (the mask does not depend on x). */
static void test_gradient(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(52);
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, 3, 5);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, s);
  rf_output y = rf_dropout(g, "drop", x, 0.4, 7);
  rf_tensor *r = rf_test_random_tensor(&rng, RF_FLOAT64, s, -1, 1);
  rf_output l = rf_sum(g, NULL, rf_mul(g, NULL, y, rf_const(g, NULL, r)), NULL,
                       -1, false);
  rf_output dx;
  assert_ok(rf_gradients(g, &l, 1, &x, 1, NULL, &dx));
  rf_tensor *tx = rf_test_random_tensor(&rng, RF_FLOAT64, s, -1, 1);
  rf_feed f = {x, tx};
  rf_session *sess = rf_test_cpu_session(g, 1);
  rf_output fetch[2] = {dx, {y.node, 1}};
  rf_tensor *got[2];
  assert_ok(rf_session_run(sess, &f, 1, fetch, 2, NULL, 0, got));
  int kept = 0;
  for (int64_t i = 0; i < 15; i++) {
    double m = rf_tensor_get(got[1], i);
    kept += m != 0;
    assert_true(m == 0 || fabs(m - 1 / 0.6) < 1e-15);
    assert_true(fabs(rf_tensor_get(got[0], i) - m * rf_tensor_get(r, i)) <
                1e-15);
  }
  assert_true(kept > 0 && kept < 15);
  rf_tensor_release(got[0]);
  rf_tensor_release(got[1]);
  rf_tensor_release(r);
  rf_tensor_release(tx);
  rf_session_free(sess);
  rf_graph_free(g);
}

static void test_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 3));
  assert_null(rf_dropout(g, "bad", x, 1.0, 0).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'bad' (Dropout): rate 1 must be in [0, 1)");
  rf_graph_clear_status(g);
  assert_null(rf_dropout(g, "bad", x, -0.1, 0).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "rate -0.1");
  rf_graph_clear_status(g);
  rf_output i = rf_placeholder(g, "i", RF_INT32, rf_shape_of(1, 3));
  assert_null(rf_dropout(g, "bad", i, 0.5, 0).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "(Dropout)");
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_known_answers),
      cmocka_unit_test(test_decisions_match_the_documented_key),
      cmocka_unit_test(test_gradient),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
