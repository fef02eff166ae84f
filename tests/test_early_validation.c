/* tests/test_early_validation.c - what the graph already knows is refused
 * when it is built or when the session is made, not at the first run:
 *  - the n-input collective builders (rf_all_reduce_n, rf_all_gather_n,
 *    rf_reduce_scatter_n, rf_reduce) given inputs of different dtypes:
 *    INVALID_ARGUMENT naming both inputs, their dtypes and devices, and
 *    nothing added;
 *  - a Reduce on a device none of its inputs is on: refused by rf_reduce
 *    (devices are known then); moved there later with rf_node_set_device,
 *    the lowering still says so before anything runs;
 *  - a node on a device the session does not have (cpu:9 with 4 devices):
 *    rf_session_new fails naming the node, op and device and how many
 *    devices the session has. */
#include <stdio.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "testutil.h"

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

static rf_output ph(rf_graph *g, const char *name, const char *dev,
                    rf_dtype dt) {
  assert_ok(rf_graph_push_device(g, dev));
  rf_output x = rf_placeholder(g, name, dt, rf_shape_of(1, (int64_t)4));
  rf_graph_pop_device(g);
  return x;
}

/* ---- n-input builders: one dtype ---- */

static void test_n_input_builders_refuse_mixed_dtypes(void **state) {
  static const char *const ops[] = {"AllReduce", "AllGather", "ReduceScatter",
                                    "Reduce"};
  for (int which = 0; which < 4; which++) {
    rf_graph *g = rf_graph_new();
    rf_output xs[3] = {ph(g, "a", "cpu:0", RF_FLOAT32),
                       ph(g, "b", "cpu:1", RF_FLOAT32),
                       ph(g, "c", "cpu:2", RF_FLOAT64)};
    rf_output outs[3] = {{NULL, 0}, {NULL, 0}, {NULL, 0}};
    rf_output y = {NULL, 0};
    switch (which) {
      case 0: rf_all_reduce_n(g, "coll", xs, 3, RF_REDUCE_SUM, outs); break;
      case 1: rf_all_gather_n(g, "coll", xs, 3, outs); break;
      case 2: rf_reduce_scatter_n(g, "coll", xs, 3, RF_REDUCE_SUM, outs); break;
      case 3: y = rf_reduce(g, "coll", xs, 3, RF_REDUCE_SUM); break;
    }
    assert_null(outs[0].node);
    assert_null(y.node);
    assert_int_equal(rf_graph_num_nodes(g), 3); /* nothing added */
    rf_status *st = rf_graph_status(g);
    assert_non_null(st);
    const char *m = rf_status_message(st);
    assert_contains(m, ops[which]);
    assert_contains(m, "'coll'");
    assert_contains(m, "input 0 (node 'a') is float32 on cpu:0");
    assert_contains(m, "input 2 (node 'c') is float64 on cpu:2");
    assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
    rf_status_free(st);
    rf_graph_free(g);
  }
}

/* Integer and float inputs are different dtypes too; one dtype passes. */
static void test_n_input_builders_accept_one_dtype(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output xs[2] = {ph(g, "a", "cpu:0", RF_INT32),
                     ph(g, "b", "cpu:1", RF_INT32)},
            ys[2];
  rf_all_reduce_n(g, "ok", xs, 2, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  rf_output zs[2] = {ph(g, "c", "cpu:0", RF_INT32),
                     ph(g, "d", "cpu:1", RF_INT64)};
  rf_all_reduce_n(g, "bad", zs, 2, RF_REDUCE_SUM, ys);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "input 1 (node 'd') is int64 on cpu:1");
  rf_graph_free(g);
}

/* ---- Reduce with no input on its device ---- */

static void test_reduce_without_input_on_its_device_at_build(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output xs[2] = {ph(g, "x1", "cpu:1", RF_FLOAT32),
                     ph(g, "x2", "cpu:2", RF_FLOAT32)};
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output r = rf_reduce(g, "misplaced", xs, 2, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  assert_null(r.node);
  assert_int_equal(rf_graph_num_nodes(g), 2);
  rf_status *st = rf_graph_status(g);
  assert_non_null(st);
  const char *m = rf_status_message(st);
  assert_contains(m, "No input tensor uses the same device as the Reduce op");
  assert_contains(m, "'misplaced'");
  assert_contains(m, "cpu:0");
  assert_contains(m, "cpu:1, cpu:2");
  rf_status_free(st);
  rf_graph_free(g);
  /* unnamed: no node quoted (it had "node '(unnamed)'", a name no node can
   * have, which Python's node_name took for one) */
  g = rf_graph_new();
  xs[0] = ph(g, "x1", "cpu:1", RF_FLOAT32);
  xs[1] = ph(g, "x2", "cpu:2", RF_FLOAT32);
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  r = rf_reduce(g, NULL, xs, 2, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  assert_null(r.node);
  m = rf_status_message(st = rf_graph_status(g));
  assert_contains(m, "the Reduce is on cpu:0, its inputs on cpu:1, cpu:2");
  if (strstr(m, "'")) fail_msg("a quoted name in: %s", m);
  rf_status_free(st);
  rf_graph_free(g);
}

/* Which device a task-less name means depends on the process: such a pair
 * is left to placement. */
static void test_reduce_with_task_ambiguity_is_left_to_placement(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output xs[2] = {ph(g, "x0", "/task:0/cpu:0", RF_FLOAT32),
                     ph(g, "x1", "/task:1/cpu:0", RF_FLOAT32)};
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output r = rf_reduce(g, "r", xs, 2, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  assert_non_null(r.node);
  rf_graph_free(g);
}

/* Decided late (the Reduce moved after it was built): the lowering still
 * refuses it before anything runs. */
static void test_reduce_moved_later_fails_at_compile(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output xs[2] = {ph(g, "x1", "cpu:1", RF_FLOAT32),
                     ph(g, "x2", "cpu:2", RF_FLOAT32)};
  rf_output r = rf_reduce(g, "moved", xs, 2, RF_REDUCE_SUM);
  assert_graph_ok(g);
  assert_ok(rf_node_set_device(r.node, "cpu:0"));
  rf_session *s = rf_test_cpu_session(g, 3);
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &r, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT,
                "No input tensor uses the same device as the Reduce op");
  assert_null(out);
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- devices the session does not have ---- */

static void test_session_refuses_missing_devices(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = ph(g, "x", "cpu:0", RF_FLOAT32);
  assert_ok(rf_graph_push_device(g, "cpu:9"));
  rf_identity(g, "far", x);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 4;
  rf_session *s = NULL;
  rf_status *st = rf_session_new(g, &o, &s);
  assert_null(s);
  assert_non_null(st);
  const char *m = rf_status_message(st);
  assert_contains(m, "node 'far' (Identity) requests device cpu:9");
  assert_contains(m, "cpu:0..cpu:3");
  assert_contains(m, "4 devices");
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  rf_status_free(st);
  /* A GPU the session does not have, the same way. */
  rf_graph_free(g);
  g = rf_graph_new();
  ph(g, "on_gpu", "gpu:0", RF_FLOAT32);
  o.num_cpu_devices = 1;
  s = NULL;
  st = rf_session_new(g, &o, &s);
  assert_null(s);
  assert_non_null(st);
  m = rf_status_message(st);
  assert_contains(m, "node 'on_gpu' (Placeholder) requests device gpu:0");
  assert_contains(m, "1 device");
  rf_status_free(st);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_n_input_builders_refuse_mixed_dtypes),
      cmocka_unit_test(test_n_input_builders_accept_one_dtype),
      cmocka_unit_test(test_reduce_without_input_on_its_device_at_build),
      cmocka_unit_test(test_reduce_with_task_ambiguity_is_left_to_placement),
      cmocka_unit_test(test_reduce_moved_later_fails_at_compile),
      cmocka_unit_test(test_session_refuses_missing_devices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
