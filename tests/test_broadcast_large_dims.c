/* tests/test_broadcast_large_dims.c - broadcasts whose dims do not fit in
 * int32. The lowering gives each receiver its expected shape as an int64
 * Const when a known dim passes 2^31 - 1 (int32 otherwise), and a Shape
 * node with out_type int64 when the shape is known only at run time, so
 * the receiver never sees a saturated dim. One real broadcast of 2^31 + 5
 * int8 elements (2 GiB, shared by both devices) checks values at sampled
 * positions, the first and last included. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "ringflow/collectives.h"
#include "testutil.h"

static const int64_t BIG = 2147483648LL + 5; /* 2^31 + 5 */

static rf_graph *lower(const rf_graph *g, int ndev) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ndev;
  rf_graph *out = NULL;
  assert_ok(rf_graph_lower(g, &o, &out));
  return out;
}

/* The single node of op `op` on device `dev`. */
static rf_node *one_on(const rf_graph *g, const char *op, const char *dev) {
  rf_node *found = NULL;
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    rf_node *x = rf_graph_node(g, i);
    if (strcmp(rf_node_op(x), op) == 0 && strcmp(rf_node_device(x), dev) == 0)
      found = x, n++;
  }
  assert_int_equal(n, 1);
  return found;
}

/* x (int8, shape s) on cpu:0, broadcast, read by an Identity on cpu:1. */
static rf_graph *graph(rf_shape s, rf_output *x, rf_output *y) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  *x = rf_placeholder(g, "x", RF_INT8, s);
  rf_output b = rf_broadcast(g, "bc", *x);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  *y = rf_identity(g, "y", b);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  return g;
}

/* The receiver's shape input: a Const of dtype want holding dims. */
static void expect_const_shape(rf_shape s, rf_dtype want) {
  rf_output x, y;
  rf_graph *g = graph(s, &x, &y);
  rf_graph *lg = lower(g, 2);
  rf_node *recv = one_on(lg, "_BroadcastRecv", "cpu:1");
  rf_output k = rf_node_input(recv, 0);
  assert_string_equal(rf_node_op(k.node), "Const");
  assert_int_equal(rf_output_dtype(k), want);
  rf_tensor *v = NULL;
  assert_ok(rf__attrs_get_tensor(&k.node->attrs, "value", &v));
  assert_int_equal(rf_tensor_num_elements(v), s.rank);
  for (int i = 0; i < s.rank; i++) {
    int64_t got = want == RF_INT64 ? ((const int64_t *)rf_tensor_data(v))[i]
                                   : ((const int32_t *)rf_tensor_data(v))[i];
    assert_int_equal(got, s.dims[i]);
  }
  rf_shape rs = rf_output_shape((rf_output){recv, 0});
  assert_true(rf_shape_equal(&rs, &s));
  rf_graph_free(lg);
  rf_graph_free(g);
}

static void test_known_dims_past_int32_give_an_int64_const(void **state) {
  expect_const_shape(rf_shape_of(1, BIG), RF_INT64);
  expect_const_shape(rf_shape_of(1, (int64_t)2147483648LL), RF_INT64);
  expect_const_shape(rf_shape_of(3, (int64_t)2, (int64_t)1 << 40, (int64_t)3),
                     RF_INT64);
  /* Dims that fit keep the int32 Const. */
  expect_const_shape(rf_shape_of(1, (int64_t)INT32_MAX), RF_INT32);
  expect_const_shape(rf_shape_of(2, (int64_t)4, (int64_t)7), RF_INT32);
}

/* Unknown dims may be anything at run time: the Shape node the lowering
 * makes says int64, so the user never meets "use out_type int64". */
static void test_unknown_dims_give_an_int64_shape_node(void **state) {
  rf_output x, y;
  rf_graph *g = graph(rf_shape_of(2, (int64_t)-1, (int64_t)3), &x, &y);
  rf_graph *lg = lower(g, 2);
  rf_node *recv = one_on(lg, "_BroadcastRecv", "cpu:1");
  rf_output k = rf_node_input(recv, 0);
  assert_string_equal(rf_node_op(k.node), "Shape");
  assert_string_equal(rf_node_device(k.node), "cpu:0");
  assert_int_equal(rf_output_dtype(k), RF_INT64);
  rf_dtype ot;
  assert_ok(rf_node_attr_dtype(k.node, "out_type", &ot));
  assert_int_equal(ot, RF_INT64);
  rf_graph_free(lg);
  /* and it runs */
  uint64_t rng = rf_test_rng(1);
  rf_shape s = rf_shape_of(2, (int64_t)5, (int64_t)3);
  rf_tensor *in = rf_test_random_tensor(&rng, RF_INT8, s, -100, 100), *out;
  rf_feed feed = {x, in};
  rf_test_run(g, 2, &feed, 1, &y, 1, &out);
  double *want = rf_test_to_doubles(in);
  assert_tensor_near(out, s, want, 0);
  free(want);
  rf_tensor_release(in);
  rf_tensor_release(out);
  rf_graph_free(g);
}

static int8_t pattern(int64_t i) {
  uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ULL;
  return (int8_t)(h >> 56);
}

/* 2 GiB of int8 with static shape (2^31 + 5) from cpu:0 to cpu:1 (the
 * reported failure: "participants disagree on shape: (2147483653) on cpu:0
 * ... but (2147483647) on cpu:1"). */
static void test_broadcast_of_2_gib(void **state) {
  rf_shape s = rf_shape_of(1, BIG);
  rf_output x, y;
  rf_graph *g = graph(s, &x, &y);
  rf_tensor *in;
  assert_ok(rf_tensor_new(RF_INT8, &s, NULL, &in));
  int8_t *d = rf_tensor_mutable_data(in);
  for (int64_t i = 0; i < BIG; i++) d[i] = pattern(i);
  rf_feed feed = {x, in};
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  rf_session *sess;
  assert_ok(rf_session_new(g, &o, &sess));
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(sess, &feed, 1, &y, 1, NULL, 0, &out));
  rf_shape got = rf_tensor_shape(out);
  assert_true(rf_shape_equal(&got, &s));
  assert_int_equal(rf_tensor_dtype(out), RF_INT8);
  const int8_t *o8 = rf_tensor_data(out);
  uint64_t rng = rf_test_rng(2);
  int64_t probes[1000 + 6] = {
      0, 1, INT32_MAX - 1, INT32_MAX, INT32_MAX + 1LL, BIG - 1};
  for (int k = 6; k < 1006; k++)
    probes[k] = (int64_t)(rf_test_rand(&rng) % (uint64_t)BIG);
  for (int k = 0; k < 1006; k++) {
    int64_t i = probes[k];
    if (o8[i] != pattern(i))
      fail_msg("element %lld: got %d want %d", (long long)i, o8[i], pattern(i));
  }
  rf_tensor_release(out);
  rf_session_free(sess);
  rf_tensor_release(in);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_dims_past_int32_give_an_int64_const),
      cmocka_unit_test(test_unknown_dims_give_an_int64_shape_node),
      cmocka_unit_test(test_broadcast_of_2_gib),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
