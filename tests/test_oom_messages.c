/* tests/test_oom_messages.c - what a user reads when memory runs out during a
 * step: RESOURCE_EXHAUSTED with a message naming the node, op and device
 * (never the bare shared "out of memory"), whether the memory asked for is
 * absurd (a [2^40] float32 tensor: a kernel's output, a variable's
 * initializer, a fed tensor's consumer) or a small allocation fails
 * (ringflow/debug.h's injection, swept over every allocation of a step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/debug.h"
#include "testutil.h"

/* A [2^40] float32 request must come back NULL, not stop the test, under
 * AddressSanitizer and ThreadSanitizer too. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) {
  return "allocator_may_return_null=1";
}

#define HUGE_N ((int64_t)1 << 40)

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

/* st must be RESOURCE_EXHAUSTED naming node `node` of op `op` on cpu:0. */
static void assert_named_oom(rf_status *st, const char *node, const char *op) {
  assert_non_null(st);
  const char *msg = rf_status_message(st);
  char want[256];
  snprintf(want, sizeof want, "node '%s' (%s) on ", node, op);
  assert_contains(msg, want);
  assert_contains(msg, "cpu:0");
  assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
}

/* Fill of [2^40] float32: an int64 dims Const and a float scalar. */
static rf_output huge_fill(rf_graph *g, const char *name) {
  rf_shape one = rf_shape_of(1, 1);
  rf_tensor *dims;
  assert_ok(rf_tensor_new(RF_INT64, &one, NULL, &dims));
  ((int64_t *)rf_tensor_mutable_data(dims))[0] = HUGE_N;
  rf_output d = rf_const(g, NULL, dims);
  rf_tensor_release(dims);
  rf_output v = rf_const_scalar(g, NULL, RF_FLOAT32, 1.0);
  return rf_fill(g, name, d, v);
}

static void test_kernel_output_too_large(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output big = huge_fill(g, "big");
  assert_graph_ok(g);
  rf_tensor *out = NULL;
  rf_status *st = rf_test_try_run(g, NULL, 0, &big, 1, &out);
  assert_null(out);
  assert_named_oom(st, "big", "Fill");
  rf_graph_free(g);
}

static void test_variable_initializer_too_large(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output w = rf_variable(g, "w", RF_FLOAT32, rf_shape_of(1, HUGE_N));
  rf_node *init = rf_assign(g, "w/init", w, huge_fill(g, "w/initial_value"));
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_status *st = rf_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL);
  assert_named_oom(st, "w/initial_value", "Fill");
  /* the variable stays unset: reading it names it */
  rf_output r = rf_read_variable(g, "w/read", w);
  rf_session_free(s);
  assert_graph_ok(g);
  rf_tensor *out = NULL;
  assert_status(rf_test_try_run(g, NULL, 0, &r, 1, &out),
                RF_FAILED_PRECONDITION, "'w'");
  rf_graph_free(g);
}

/* The data is never read: the consumer's output cannot be allocated. */
static void test_fed_tensor_too_large(void **state) {
  static float cell;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, -1));
  rf_output y = rf_neg(g, "neg", x);
  assert_graph_ok(g);
  rf_shape s = rf_shape_of(1, HUGE_N);
  rf_tensor *t;
  assert_ok(rf_tensor_new_external(RF_FLOAT32, &s, &cell, NULL, NULL, &t));
  rf_feed feed = {x, t};
  rf_tensor *out = NULL;
  rf_status *st = rf_test_try_run(g, &feed, 1, &y, 1, &out);
  assert_null(out);
  assert_named_oom(st, "neg", "Neg");
  rf_tensor_release(t);
  rf_graph_free(g);
}

/* A step of a compiled plan (a product, an update, a fetch) with its k-th
 * allocation failing, k = 1, 2, ... until the step succeeds: every failure
 * is RESOURCE_EXHAUSTED and says where (a node, op and device, or the
 * session call), never the bare "out of memory". */
static void test_small_failures_in_a_step_say_where(void **state) {
  uint64_t rng = rf_test_seed();
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 3, 4));
  rf_output w = rf_variable(g, "w", RF_FLOAT32, rf_shape_of(2, 4, 5));
  rf_tensor *w0 =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 4, 5), -1, 1);
  rf_node *init = rf_assign(g, "w/init", w, rf_const(g, NULL, w0));
  rf_output wr = rf_read_variable(g, "w/read", w);
  rf_output y = rf_matmul(g, "y", x, wr, false, false);
  rf_output lr = rf_const_scalar(g, "lr", RF_FLOAT32, 0.5);
  rf_output d = rf_matmul(g, "d", x, rf_neg(g, "neg", y), true, false);
  rf_node *upd = rf_apply_gradient_descent(g, "update", w, lr, d);
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL));
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 3, 4), -1, 1);
  rf_feed feed = {x, xv};
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, &feed, 1, &y, 1, &upd, 1, &out)); /* compiled */
  rf_tensor_release(out);
  int failures = 0;
  for (int64_t k = 1;; k++) {
    assert_true(k < 1000);
    out = NULL;
    rf_debug_fail_allocation_once(k);
    rf_status *st = rf_session_run(s, &feed, 1, &y, 1, &upd, 1, &out);
    rf_debug_fail_allocation_once(0);
    if (!st) {
      rf_tensor_release(out);
      break;
    }
    failures++;
    const char *msg = rf_status_message(st);
    if (strcmp(msg, "out of memory") == 0)
      fail_msg("allocation %lld: the bare message '%s'", (long long)k, msg);
    if (!strstr(msg, "rf_session_run")) {
      assert_contains(msg, "node '");
      assert_contains(msg, " on ");
      assert_contains(msg, "cpu:0");
    }
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    assert_null(out);
  }
  assert_true(failures > 0);
  rf_tensor_release(xv);
  rf_tensor_release(w0);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernel_output_too_large),
      cmocka_unit_test(test_variable_initializer_too_large),
      cmocka_unit_test(test_fed_tensor_too_large),
      cmocka_unit_test(test_small_failures_in_a_step_say_where),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
