/* tests/test_fault_injection.c - Lua's ltests trick on the whole stack: for
 * every k, fail the k-th library allocation (and all after it) while a small
 * graph with gradients and collectives over 3 devices is built, compiled and
 * run. Each attempt must end in RESOURCE_EXHAUSTED (or succeed once k passes
 * the last allocation), never crash or hang, and leak nothing. */
#include <stdio.h>
#include <stdlib.h>

#include "ringflow/collectives.h"
#include "ringflow/debug.h"
#include "testutil.h"

/* Builds, differentiates, compiles and runs; returns the first error. */
static rf_status *attempt(rf_tensor *xv, rf_tensor *wv, double *result) {
  rf_graph *g = rf_graph_new();
  if (!g) return rf_status_new(RF_RESOURCE_EXHAUSTED, "rf_graph_new");
  rf_output xs[3], ys[3];
  rf_status *st = NULL;
  for (int d = 0; d < 3 && !st; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    st = rf_graph_push_device(g, dev);
    if (st) break;
    rf_output x = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(2, 2, 3));
    rf_output w = rf_const(g, NULL, wv);
    xs[d] = rf_relu(g, NULL, rf_matmul(g, NULL, x, w, false, false));
    rf_graph_pop_device(g);
    (void)x;
  }
  if (!st) {
    rf_all_reduce_n(g, "sum", xs, 3, RF_REDUCE_SUM, ys);
    rf_graph_push_device(g, "cpu:0");
    rf_output r = rf_reduce(g, "r", ys, 3, RF_REDUCE_SUM);
    rf_output loss = rf_sum(g, NULL, rf_broadcast(g, NULL, r), NULL, -1, false);
    rf_graph_pop_device(g);
    st = rf_graph_status(g);
    rf_output dx[3], xin[3];
    for (int d = 0; d < 3; d++)
      xin[d] = rf_node_input(rf_node_input(xs[d].node, 0).node, 0);
    if (!st) st = rf_gradients(g, &loss, 1, xin, 3, NULL, dx);
    rf_session *s = NULL;
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_cpu_devices = 3;
    o.collective_timeout_ms = 10000;
    if (!st) st = rf_session_new(g, &o, &s);
    rf_feed feeds[3];
    for (int d = 0; d < 3; d++) {
      rf_output xd = rf_node_input(rf_node_input(xs[d].node, 0).node, 0);
      feeds[d] = (rf_feed){xd, xv};
    }
    rf_output fetches[2] = {loss, dx[0]};
    rf_tensor *out[2] = {NULL, NULL};
    if (!st) st = rf_session_run(s, feeds, 3, fetches, 2, NULL, 0, out);
    if (!st) *result = rf_tensor_get(out[0], 0) + rf_tensor_get(out[1], 0);
    rf_tensor_release(out[0]);
    rf_tensor_release(out[1]);
    rf_session_free(s);
  }
  rf_graph_free(g);
  return st;
}

static void test_every_allocation_failure(void **state) {
  uint64_t rng = rf_test_seed();
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 2, 3), -1, 1);
  rf_tensor *wv =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(2, 3, 3), -1, 1);
  double want = 0, got = 0;
  assert_ok(attempt(xv, wv, &want)); /* warm-up: registries filled */
  int failures = 0;
  for (int64_t k = 1;; k++) {
    rf_default_allocator_trim();
    int64_t before = rf_debug_live_allocations();
    if (getenv("RF_TEST_VERBOSE")) fprintf(stderr, "k=%lld\n", (long long)k);
    rf_debug_fail_allocation_after(k);
    rf_status *st = attempt(xv, wv, &got);
    rf_debug_fail_allocation_after(0);
    rf_default_allocator_trim();
    int64_t after = rf_debug_live_allocations();
    if (after != before)
      fail_msg("k=%lld: %lld allocations leaked (%s)", (long long)k,
               (long long)(after - before), st ? rf_status_message(st) : "ok");
    if (!st) {
      assert_true(got == want);
      break;
    }
    if (rf_status_code(st) != RF_RESOURCE_EXHAUSTED)
      fail_msg("k=%lld: expected RESOURCE_EXHAUSTED, got %s: %s", (long long)k,
               rf_code_name(rf_status_code(st)), rf_status_message(st));
    rf_status_free(st);
    failures++;
    assert_true(k < 200000);
  }
  fprintf(stderr, "%d allocation points failed cleanly\n", failures);
  assert_true(failures > 100);
  rf_tensor_release(xv);
  rf_tensor_release(wv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_allocation_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
