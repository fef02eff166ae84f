/* tests/graph_test_ops.h - a few ops registered by the graph tests themselves
 * (so the builder can be tested without the real op families), and a checker
 * of the invariants of src/graph/graph.h. Header-only: each test includes it
 * once. */
#ifndef RF_TESTS_GRAPH_TEST_OPS_H
#define RF_TESTS_GRAPH_TEST_OPS_H

#include <string.h>

#include "graph/graph.h"
#include "ops/op_registry.h"
#include "runtime/families.h"
#include "testutil.h"

/* out = attr shape */
static rf_status *source_shape(rf__shape_ctx *c) {
  rf_shape s;
  rf_status *st = rf__attrs_get_shape(&c->node->attrs, "shape", &s);
  if (st) return st;
  c->output_shapes[0] = s;
  return NULL;
}

/* Equal shapes or an error naming both. */
static rf_status *add_shape(rf__shape_ctx *c) {
  const rf_shape *a = &c->input_shapes[0], *b = &c->input_shapes[1];
  if (a->rank >= 0 && b->rank >= 0 && !rf_shape_equal(a, b)) {
    char x[64], y[64];
    rf_shape_format(a, x, sizeof x);
    rf_shape_format(b, y, sizeof y);
    return rf_status_new(RF_INVALID_ARGUMENT, "shapes %s and %s differ", x, y);
  }
  c->output_shapes[0] = a->rank >= 0 ? *a : *b;
  return NULL;
}

/* Concatenation along axis 0 of N inputs of rank >= 1. */
static rf_status *concat_shape(rf__shape_ctx *c) {
  rf_shape s = c->input_shapes[0];
  for (int k = 1; k < c->num_inputs; k++) {
    if (s.rank < 1 || c->input_shapes[k].rank != s.rank) return NULL;
    s.dims[0] += c->input_shapes[k].dims[0];
  }
  c->output_shapes[0] = s;
  return NULL;
}

/* The shape comes from the value of input 1 when it is a Const. */
static rf_status *reshape_shape(rf__shape_ctx *c) {
  rf_tensor *v = c->input_values[1];
  if (!v) return NULL;
  int64_t dims[RF_MAX_RANK];
  int n = (int)rf_tensor_num_elements(v);
  for (int k = 0; k < n && k < RF_MAX_RANK; k++)
    dims[k] = (int64_t)rf_tensor_get(v, k);
  c->output_shapes[0] = rf_shape_make(n, dims);
  return NULL;
}

static const rf__op_spec test_op_specs[] = {
    {.name = "TestSource",
     .outputs = "out: T",
     .attrs = "T: type = float32; shape: shape = ?",
     .shape = source_shape},
    {.name = "TestAdd",
     .inputs = "a: T, b: T",
     .outputs = "sum: T",
     .attrs = "T: type in {@numeric}",
     .shape = add_shape},
    {.name = "TestConcat",
     .inputs = "values: N * T",
     .outputs = "output: T",
     .attrs = "N: int >= 1; T: type",
     .shape = concat_shape},
    {.name = "TestSplit",
     .inputs = "x: T",
     .outputs = "parts: num * T, count: int64",
     .attrs = "T: type; num: int >= 1 = 2"},
    {.name = "TestOpts",
     .outputs = "out: int32",
     .attrs = "mode: string in {sum, max} = sum; k: int >= 2 = 3; "
              "scale: float = 1.5; flag: bool = false; dims: list(int) = [];"
              "rates: list(float) = [0.5, 2]"},
    {.name = "TestSink", .inputs = "x: T", .attrs = "T: type"},
    {.name = "TestCast",
     .inputs = "x: SrcT",
     .outputs = "y: DstT",
     .attrs = "SrcT: type; DstT: type in {@float, int32}"},
    {.name = "TestReshape",
     .inputs = "x: T, shape: int32",
     .outputs = "y: T",
     .attrs = "T: type",
     .shape = reshape_shape},
};

static const rf__op_spec const_spec = {.name = "Const",
                                       .outputs = "output: dtype",
                                       .attrs = "value: tensor; dtype: type"};

/* Registers the test ops once per process (and a Const when the real one is
 * not linked in). */
static inline void register_test_ops(void) {
  static int done;
  if (done) return;
  done = 1;
  assert_ok(rf__registry_init());
  for (size_t i = 0; i < sizeof test_op_specs / sizeof test_op_specs[0]; i++)
    assert_ok(rf__op_register(&test_op_specs[i]));
  if (!rf__op_find("Const")) assert_ok(rf__op_register(&const_spec));
}

/* A TestSource node of dtype dt and shape s; asserts success. */
static inline rf_output src_node(rf_graph *g, const char *name, rf_dtype dt,
                                 rf_shape s) {
  rf_node_builder *b = rf_node_builder_new(g, "TestSource", name);
  rf_node_builder_attr_dtype(b, "T", dt);
  rf_node_builder_attr_shape(b, "shape", s);
  rf_node *n = NULL;
  assert_ok(rf_node_builder_finish(b, &n));
  rf_output o = {n, 0};
  return o;
}

static inline rf_output add_node(rf_graph *g, const char *name, rf_output a,
                                 rf_output b) {
  rf_node_builder *nb = rf_node_builder_new(g, "TestAdd", name);
  rf_node_builder_input(nb, a);
  rf_node_builder_input(nb, b);
  rf_node *n = NULL;
  assert_ok(rf_node_builder_finish(nb, &n));
  rf_output o = {n, 0};
  return o;
}

static inline int count_ptr(rf__edge *const *arr, int n, const rf__edge *e) {
  int c = 0;
  for (int k = 0; k < n; k++) c += arr[k] == e;
  return c;
}

/* The invariants of graph.h: ids, unique names found by lookup, every edge in
 * exactly one out_edges and one in_edges, data_in[k] the edge of slot k. */
static inline void check_invariants(const rf_graph *g) {
  int live = 0;
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *n = g->nodes[i];
    if (!n) continue;
    live++;
    assert_int_equal(n->id, i);
    assert_ptr_equal(rf_graph_find_node(g, n->name), n);
    for (int k = 0; k < n->num_in_edges; k++) {
      rf__edge *e = n->in_edges[k];
      assert_ptr_equal(e->dst, n);
      assert_ptr_equal(g->nodes[e->src->id], e->src);
      assert_int_equal(count_ptr(n->in_edges, n->num_in_edges, e), 1);
      assert_int_equal(count_ptr(e->src->out_edges, e->src->num_out_edges, e),
                       1);
      if (e->dst_in == RF_CONTROL_SLOT) {
        assert_int_equal(e->src_out, RF_CONTROL_SLOT);
      } else {
        assert_ptr_equal(n->data_in[e->dst_in], e);
        assert_true(e->src_out >= 0 && e->src_out < e->src->num_outputs);
      }
    }
    for (int k = 0; k < n->num_out_edges; k++) {
      rf__edge *e = n->out_edges[k];
      assert_ptr_equal(e->src, n);
      assert_int_equal(count_ptr(e->dst->in_edges, e->dst->num_in_edges, e), 1);
    }
    for (int k = 0; k < n->num_inputs; k++)
      if (n->data_in[k]) assert_int_equal(n->data_in[k]->dst_in, k);
  }
  assert_int_equal(live, g->num_live);
  assert_int_equal(g->names.count, live);
}

#endif
