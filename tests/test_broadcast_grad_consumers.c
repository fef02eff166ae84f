/* tests/test_broadcast_grad_consumers.c - the gradient of a Broadcast read
 * by many consumers: every consumer's contribution (two from a consumer
 * that reads it twice) is summed, per device, whatever their number - 600
 * contributions from 300 consumers on three devices and off any device -
 * against 2 x per consumer of b*b computed here. */
#include <stdio.h>

#include "ringflow/collectives.h"
#include "testutil.h"

#define N 3 /* elements */

static void check_consumers(int consumers) {
  uint64_t rng = rf_test_rng((uint64_t)consumers);
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)N);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, s);
  rf_graph_pop_device(g);
  rf_output b = rf_broadcast(g, "b", x);
  rf_output *loss = test_malloc(sizeof *loss * (size_t)consumers);
  for (int i = 0; i < consumers; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i % 4); /* i % 4 == 3: none */
    bool scoped = i % 4 != 3;
    if (scoped) assert_ok(rf_graph_push_device(g, dev));
    loss[i] = rf_sum(g, NULL, rf_mul(g, NULL, b, b), NULL, -1, false);
    if (scoped) rf_graph_pop_device(g);
  }
  rf_output dx;
  assert_ok(rf_gradients(g, loss, consumers, &x, 1, NULL, &dx));
  assert_graph_ok(g);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, s, -2, 2);
  rf_feed feed = {x, xv};
  rf_tensor *got;
  rf_test_run(g, 3, &feed, 1, &dx, 1, &got);
  double want[N];
  for (int e = 0; e < N; e++) want[e] = 2.0 * consumers * rf_tensor_get(xv, e);
  assert_tensor_near(got, s, want, 1e-12);
  rf_tensor_release(got);
  rf_tensor_release(xv);
  test_free(loss);
  rf_graph_free(g);
}

static void test_few_consumers(void **state) {
  (void)state;
  check_consumers(5);
}

/* More than 256 contributions (the limit there was). */
static void test_many_consumers(void **state) {
  (void)state;
  check_consumers(129);
  check_consumers(300);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_few_consumers),
      cmocka_unit_test(test_many_consumers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
