/* tests/test_graph.c - graphs and the node builder: names, device scopes,
 * signature checks and inference, shape functions, edges and their
 * invariants, cycles, copies, sticky errors and allocation failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_ops.h"
#include "ringflow/debug.h"

static int setup(void **state) {
  register_test_ops();
  return 0;
}

static void test_empty_graph(void **state) {
  rf_graph *g = rf_graph_new();
  assert_non_null(g);
  assert_int_equal(rf_graph_num_nodes(g), 0);
  assert_null(rf_graph_node(g, 0));
  assert_null(rf_graph_find_node(g, "x"));
  assert_null(rf_graph_status(g));
  assert_status(rf_graph_status(NULL), RF_INVALID_ARGUMENT, "NULL graph");
  rf_graph_free(g);
  rf_graph_free(NULL);
}

static void test_build_and_read(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = src_node(g, "x", RF_FLOAT64, rf_shape_of(2, 2, 3));
  rf_output y = src_node(g, "y", RF_FLOAT64, rf_shape_of(2, 2, 3));
  rf_output s = add_node(g, "s", x, y);
  assert_int_equal(rf_graph_num_nodes(g), 3);
  assert_string_equal(rf_node_name(s.node), "s");
  assert_string_equal(rf_node_op(s.node), "TestAdd");
  assert_string_equal(rf_node_device(s.node), "");
  assert_int_equal(s.node->assigned_device, -1);
  assert_int_equal(rf_node_num_inputs(s.node), 2);
  assert_int_equal(rf_node_num_outputs(s.node), 1);
  assert_ptr_equal(rf_node_input(s.node, 0).node, x.node);
  assert_ptr_equal(rf_node_input(s.node, 1).node, y.node);
  assert_null(rf_node_input(s.node, 2).node);
  assert_null(rf_node_input(s.node, -1).node);
  assert_int_equal(rf_output_dtype(s), RF_FLOAT64);
  rf_shape sh = rf_output_shape(s), want = rf_shape_of(2, 2, 3);
  assert_true(rf_shape_equal(&sh, &want));
  rf_dtype t;
  assert_ok(rf_node_attr_dtype(s.node, "T", &t));
  assert_int_equal(t, RF_FLOAT64);
  assert_ptr_equal(rf_graph_node(g, 2), s.node);
  assert_ptr_equal(rf_graph_find_node(g, "y"), y.node);
  rf_output bad = {s.node, 1};
  assert_int_equal(rf_output_dtype(bad), RF_DTYPE_INVALID);
  sh = rf_output_shape(bad);
  assert_int_equal(sh.rank, RF_UNKNOWN_RANK);
  check_invariants(g);
  rf_graph_free(g);
}

static void test_unique_names(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = src_node(g, NULL, RF_FLOAT32, rf_shape_scalar());
  rf_output b = src_node(g, NULL, RF_FLOAT32, rf_shape_scalar());
  rf_output c = src_node(g, "TestSource_2", RF_FLOAT32, rf_shape_scalar());
  rf_output d = src_node(g, NULL, RF_FLOAT32, rf_shape_scalar());
  assert_string_equal(rf_node_name(a.node), "TestSource");
  assert_string_equal(rf_node_name(b.node), "TestSource_1");
  assert_string_equal(rf_node_name(c.node), "TestSource_2");
  assert_string_equal(rf_node_name(d.node), "TestSource_3");
  rf_node_builder *nb = rf_node_builder_new(g, "TestSource", "TestSource_1");
  assert_status(rf_node_builder_finish(nb, NULL), RF_ALREADY_EXISTS,
                "'TestSource_1'");
  nb = rf_node_builder_new(g, "TestSource", "bad name");
  assert_status(rf_node_builder_finish(nb, NULL), RF_INVALID_ARGUMENT,
                "'bad name'");
  nb = rf_node_builder_new(g, "TestSource", "");
  assert_status(rf_node_builder_finish(nb, NULL), RF_INVALID_ARGUMENT, NULL);
  assert_int_equal(rf_graph_num_nodes(g), 4);
  /* A removed node's name is free again. */
  rf__graph_remove_node(g, b.node);
  rf_output e = src_node(g, "TestSource_1", RF_FLOAT32, rf_shape_scalar());
  assert_string_equal(rf_node_name(e.node), "TestSource_1");
  char buf[64];
  rf__graph_unique_name(g, "TestSource", buf, sizeof buf);
  assert_string_equal(buf, "TestSource_4");
  rf__graph_unique_name(g, "Fresh", buf, sizeof buf);
  assert_string_equal(buf, "Fresh");
  check_invariants(g);
  rf_graph_free(g);
}

static void test_device_scope(void **state) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "/device:CPU:1"));
  rf_output a = src_node(g, "a", RF_FLOAT32, rf_shape_scalar());
  assert_string_equal(rf_node_device(a.node), "cpu:1");
  assert_ok(rf_graph_push_device(g, ""));
  rf_output b = src_node(g, "b", RF_FLOAT32, rf_shape_scalar());
  assert_string_equal(rf_node_device(b.node), "");
  assert_status(rf_graph_push_device(g, "tpu:0"), RF_INVALID_ARGUMENT,
                "'tpu:0'");
  rf_graph_pop_device(g);
  rf_output c = src_node(g, "c", RF_FLOAT32, rf_shape_scalar());
  assert_string_equal(rf_node_device(c.node), "cpu:1");
  /* An explicit device wins over the scope. */
  rf_node_builder *nb = rf_node_builder_new(g, "TestSource", "d");
  rf_node_builder_device(nb, "GPU");
  rf_node *d = NULL;
  assert_ok(rf_node_builder_finish(nb, &d));
  assert_string_equal(rf_node_device(d), "gpu:0");
  nb = rf_node_builder_new(g, "TestSource", "e");
  rf_node_builder_device(nb, "cpu:x");
  assert_status(rf_node_builder_finish(nb, NULL), RF_INVALID_ARGUMENT,
                "node 'e' (TestSource)");
  rf_graph_pop_device(g);
  rf_graph_pop_device(g); /* popping an empty scope does nothing */
  rf_output f = src_node(g, "f", RF_FLOAT32, rf_shape_scalar());
  assert_string_equal(rf_node_device(f.node), "");
  assert_ok(rf_node_set_device(f.node, "/task:0/gpu:3"));
  assert_string_equal(rf_node_device(f.node), "/task:0/gpu:3");
  assert_ok(rf_node_set_device(f.node, "cpu:2"));
  assert_string_equal(rf_node_device(f.node), "cpu:2");
  assert_status(rf_node_set_device(f.node, "cpu:-1"), RF_INVALID_ARGUMENT,
                "node 'f'");
  assert_string_equal(rf_node_device(f.node), "cpu:2");
  assert_ok(rf_node_set_device(f.node, ""));
  assert_string_equal(rf_node_device(f.node), "");
  for (int i = 0; i < RF_MAX_DEVICE_SCOPE; i++)
    assert_ok(rf_graph_push_device(g, "cpu:0"));
  assert_status(rf_graph_push_device(g, "cpu:0"), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_graph_push_device(NULL, "cpu:0"), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_graph_push_device(g, NULL), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(g);
}

/* finish must fail with code/sub and add nothing. */
static void expect_fail(rf_graph *g, rf_node_builder *b, rf_code code,
                        const char *sub) {
  int before = rf_graph_num_nodes(g);
  rf_node *n = (rf_node *)&n; /* must stay untouched */
  rf_node *sentinel = n;
  assert_status(rf_node_builder_finish(b, &n), code, sub);
  assert_ptr_equal(n, sentinel);
  assert_int_equal(rf_graph_num_nodes(g), before);
  check_invariants(g);
}

static void test_builder_errors(void **state) {
  rf_graph *g = rf_graph_new();
  rf_graph *other = rf_graph_new();
  rf_output x = src_node(g, "x", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output i = src_node(g, "i", RF_INT32, rf_shape_of(1, 3));
  rf_output o = src_node(other, "o", RF_FLOAT32, rf_shape_of(1, 3));
  rf_node_builder *b;

  b = rf_node_builder_new(g, "NoSuchOp", "n");
  expect_fail(g, b, RF_NOT_FOUND, "Op type not registered 'NoSuchOp'");

  b = rf_node_builder_new(g, "TestAdd", "add");
  rf_node_builder_input(b, x);
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "node 'add' (TestAdd): expected 2 inputs (a, b), got 1");

  b = rf_node_builder_new(g, "TestAdd", "add");
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, i);
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "input 'b' of node 'add' (TestAdd) has dtype int32, expected "
              "float32");

  b = rf_node_builder_new(g, "TestAdd", "add");
  rf_node_builder_attr_dtype(b, "T", RF_INT32);
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, i);
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "input 'a' of node 'add' (TestAdd) has dtype float32, expected "
              "int32");

  rf_output bl = src_node(g, "bl", RF_BOOL, rf_shape_of(1, 3));
  b = rf_node_builder_new(g, "TestAdd", "add");
  rf_node_builder_input(b, bl);
  rf_node_builder_input(b, bl);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "attr 'T' is bool, not one of {");

  b = rf_node_builder_new(g, "TestAdd", "add");
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_int(b, "alpha", 2);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "unknown attr 'alpha'");

  b = rf_node_builder_new(g, "TestOpts", "opts");
  rf_node_builder_attr_string(b, "mode", "avg");
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "node 'opts' (TestOpts): attr 'mode' is 'avg', not one of {sum, "
              "max}");

  b = rf_node_builder_new(g, "TestOpts", "opts");
  rf_node_builder_attr_int(b, "k", 1);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "attr 'k' is 1, must be >= 2");

  b = rf_node_builder_new(g, "TestOpts", "opts");
  rf_node_builder_attr_string(b, "k", "three");
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "attr 'k' must be of type int, got string");

  /* A type attr given as another attr type is named as such, not as an
   * input "expected invalid" (also so from a graph file). */
  b = rf_node_builder_new(g, "TestAdd", "add");
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_string(b, "T", "float32");
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "node 'add' (TestAdd): attr 'T' must be of type type, got "
              "string");

  b = rf_node_builder_new(g, "TestSink", "sink");
  rf_output none = {NULL, 0};
  rf_node_builder_input(b, none);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "input 0 is invalid");

  b = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_input(b, o);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "another graph");

  b = rf_node_builder_new(g, "TestSink", "sink");
  rf_output no_out = {x.node, 1};
  rf_node_builder_input(b, no_out);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "has no output 1");

  b = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_input_list(b, &x, 1);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "input 'x' takes one tensor");

  b = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_input(b, x);
  rf_node_builder_control_input(b, o.node);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "control input 0");

  b = rf_node_builder_new(g, "TestCast", "cast");
  rf_node_builder_input(b, x);
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "node 'cast' (TestCast): missing required attr 'DstT'");

  b = rf_node_builder_new(g, "TestConcat", "cat");
  rf_node_builder_input_list(b, NULL, 0);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "missing required attr 'T'");
  b = rf_node_builder_new(g, "TestConcat", "cat");
  rf_node_builder_input_list(b, NULL, 0);
  rf_node_builder_attr_dtype(b, "T", RF_FLOAT32);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "attr 'N' is 0, must be >= 1");

  rf_output xi[2] = {x, i};
  b = rf_node_builder_new(g, "TestConcat", "cat");
  rf_node_builder_input_list(b, xi, 2);
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "input 'values'[1] of node 'cat' (TestConcat) has dtype int32");

  rf_output xx[2] = {x, x};
  b = rf_node_builder_new(g, "TestConcat", "cat");
  rf_node_builder_attr_int(b, "N", 3);
  rf_node_builder_input_list(b, xx, 2);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "attr 'N' does not match");

  /* The shape function's error, prefixed with the node and op. */
  rf_output y = src_node(g, "y", RF_FLOAT32, rf_shape_of(2, 3, 1));
  b = rf_node_builder_new(g, "TestAdd", "add");
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, y);
  expect_fail(g, b, RF_INVALID_ARGUMENT,
              "node 'add' (TestAdd): shapes (3) and (3, 1) differ");

  b = rf_node_builder_new(NULL, "TestSource", "z");
  assert_status(rf_node_builder_finish(b, NULL), RF_INVALID_ARGUMENT,
                "NULL graph");
  b = rf_node_builder_new(g, NULL, "z");
  expect_fail(g, b, RF_INVALID_ARGUMENT, "NULL op");
  b = rf_node_builder_new(g, "TestOpts", "z");
  rf_node_builder_attr_string(b, "mode", NULL);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "NULL string");
  b = rf_node_builder_new(g, "Const", "z");
  rf_node_builder_attr_tensor(b, "value", NULL);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "NULL tensor");
  b = rf_node_builder_new(g, "TestOpts", "z");
  rf_node_builder_attr_int_list(b, "dims", NULL, 2);
  expect_fail(g, b, RF_INVALID_ARGUMENT, "bad list");
  assert_status(rf_node_builder_finish(NULL, NULL), RF_INVALID_ARGUMENT, NULL);
  /* Setters on NULL are ignored. */
  rf_node_builder_input(NULL, x);
  rf_node_builder_attr_int(NULL, "k", 1);
  rf_node_builder_device(NULL, "cpu");
  rf_node_builder_control_input(NULL, x.node);
  rf_graph_free(other);
  rf_graph_free(g);
}

static void test_inference_and_defaults(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = src_node(g, "a", RF_INT64, rf_shape_of(2, 2, 5));
  rf_output b = src_node(g, "b", RF_INT64, rf_shape_of(2, 3, 5));
  rf_output ab[3] = {a, b, a};
  rf_node_builder *nb = rf_node_builder_new(g, "TestConcat", NULL);
  rf_node_builder_input_list(nb, ab, 3);
  rf_node *cat = NULL;
  assert_ok(rf_node_builder_finish(nb, &cat));
  int64_t n;
  rf_dtype t;
  assert_ok(rf_node_attr_int(cat, "N", &n));
  assert_int_equal(n, 3);
  assert_ok(rf_node_attr_dtype(cat, "T", &t));
  assert_int_equal(t, RF_INT64);
  rf_output co = {cat, 0};
  rf_shape s = rf_output_shape(co), want = rf_shape_of(2, 7, 5);
  assert_true(rf_shape_equal(&s, &want));
  assert_int_equal(rf_node_num_inputs(cat), 3);
  assert_int_equal(cat->arg_start[0], 0);
  assert_int_equal(cat->arg_start[1], 3);

  /* Variadic outputs count from a (default) number attr. */
  nb = rf_node_builder_new(g, "TestSplit", "split");
  rf_node_builder_input(nb, a);
  rf_node_builder_attr_int(nb, "num", 3);
  rf_node *sp = NULL;
  assert_ok(rf_node_builder_finish(nb, &sp));
  assert_int_equal(rf_node_num_outputs(sp), 4);
  for (int k = 0; k < 3; k++) {
    rf_output o = {sp, k};
    assert_int_equal(rf_output_dtype(o), RF_INT64);
  }
  rf_output last = {sp, 3};
  assert_int_equal(rf_output_dtype(last), RF_INT64);
  nb = rf_node_builder_new(g, "TestSplit", NULL);
  rf_node_builder_input(nb, a);
  assert_ok(rf_node_builder_finish(nb, &sp));
  assert_int_equal(rf_node_num_outputs(sp), 3);

  /* Defaults of every scalar kind, and an int given for a float attr. */
  nb = rf_node_builder_new(g, "TestOpts", "opts");
  rf_node_builder_attr_int(nb, "scale", 4);
  rf_node *op = NULL;
  assert_ok(rf_node_builder_finish(nb, &op));
  const char *mode;
  double scale;
  bool flag;
  assert_ok(rf_node_attr_string(op, "mode", &mode));
  assert_string_equal(mode, "sum");
  assert_ok(rf_node_attr_int(op, "k", &n));
  assert_int_equal(n, 3);
  assert_ok(rf_node_attr_float(op, "scale", &scale));
  assert_true(scale == 4.0);
  assert_ok(rf_node_attr_bool(op, "flag", &flag));
  assert_false(flag);
  const int64_t *dims;
  int nd = -1;
  assert_ok(rf__attrs_get_int_list(&op->attrs, "dims", &dims, &nd));
  assert_int_equal(nd, 0);
  const rf__attr_value *rates = rf__attrs_find(&op->attrs, "rates");
  assert_non_null(rates);
  assert_int_equal(rates->n, 2);
  assert_true(rates->u.floats[0] == 0.5 && rates->u.floats[1] == 2.0);
  rf_output oo = {op, 0};
  assert_int_equal(rf_output_dtype(oo), RF_INT32);

  /* Attribute reads: absent, wrong type, NULL. */
  assert_status(rf_node_attr_int(op, "nope", &n), RF_NOT_FOUND,
                "node 'opts' (TestOpts): attr 'nope' not found");
  assert_status(rf_node_attr_int(op, "mode", &n), RF_INVALID_ARGUMENT,
                "attr 'mode' is of type string, not int");
  rf_shape sh;
  assert_status(rf_node_attr_shape(op, "k", &sh), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_node_attr_int(NULL, "k", &n), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_node_attr_float(op, NULL, &scale), RF_INVALID_ARGUMENT,
                NULL);

  /* Two type attrs: one inferred, one given. */
  nb = rf_node_builder_new(g, "TestCast", "cast");
  rf_node_builder_input(nb, a);
  rf_node_builder_attr_dtype(nb, "DstT", RF_FLOAT16);
  rf_node *cast = NULL;
  assert_ok(rf_node_builder_finish(nb, &cast));
  rf_output castout = {cast, 0};
  assert_int_equal(rf_output_dtype(castout), RF_FLOAT16);
  assert_ok(rf_node_attr_dtype(cast, "SrcT", &t));
  assert_int_equal(t, RF_INT64);
  check_invariants(g);
  rf_graph_free(g);
}

static void test_const_input_values(void **state) {
  rf_graph *g = rf_graph_new();
  int32_t dims[3] = {4, 1, 6};
  rf_shape s3 = rf_shape_of(1, 3);
  rf_tensor *v = NULL;
  assert_ok(rf_tensor_new_copy(RF_INT32, &s3, dims, &v));
  rf_node_builder *nb = rf_node_builder_new(g, "Const", "shape");
  rf_node_builder_attr_tensor(nb, "value", v);
  rf_node_builder_attr_dtype(nb, "dtype", RF_INT32);
  rf_node *c = NULL;
  assert_ok(rf_node_builder_finish(nb, &c));
  rf_tensor_release(v); /* the node holds its own reference */
  rf_output x = src_node(g, "x", RF_FLOAT32, rf_shape_of(1, 24));
  nb = rf_node_builder_new(g, "TestReshape", "r");
  rf_node_builder_input(nb, x);
  rf_node_builder_input(nb, (rf_output){c, 0});
  rf_node *r = NULL;
  assert_ok(rf_node_builder_finish(nb, &r));
  rf_shape got = rf_output_shape((rf_output){r, 0}),
           want = rf_shape_of(3, 4, 1, 6);
  assert_true(rf_shape_equal(&got, &want));
  /* A non-Const shape input gives no value: unknown shape. */
  rf_output si = src_node(g, "si", RF_INT32, rf_shape_of(1, 3));
  nb = rf_node_builder_new(g, "TestReshape", "r2");
  rf_node_builder_input(nb, x);
  rf_node_builder_input(nb, si);
  assert_ok(rf_node_builder_finish(nb, &r));
  got = rf_output_shape((rf_output){r, 0});
  assert_int_equal(got.rank, RF_UNKNOWN_RANK);
  rf_graph_free(g);
}

static void test_control_edges_and_cycles(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = src_node(g, "a", RF_FLOAT32, rf_shape_scalar());
  rf_output b = add_node(g, "b", a, a);
  rf_output c = add_node(g, "c", b, a);
  rf_output d = src_node(g, "d", RF_FLOAT32, rf_shape_scalar());
  assert_ok(rf_graph_add_control_edge(g, a.node, d.node));
  assert_true(rf__graph_has_control_edge(a.node, d.node));
  assert_false(rf__graph_has_control_edge(d.node, a.node));
  assert_ok(rf_graph_add_control_edge(g, a.node, d.node)); /* no duplicate */
  assert_int_equal(rf_node_num_control_inputs(d.node), 1);
  assert_ptr_equal(rf_node_control_input(d.node, 0), a.node);
  assert_null(rf_node_control_input(d.node, 1));
  assert_status(rf_graph_add_control_edge(g, c.node, a.node),
                RF_INVALID_ARGUMENT, "would create a cycle");
  assert_status(rf_graph_add_control_edge(g, d.node, a.node),
                RF_INVALID_ARGUMENT, "would create a cycle");
  assert_status(rf_graph_add_control_edge(g, b.node, b.node),
                RF_INVALID_ARGUMENT, "would create a cycle");
  assert_ok(rf_graph_add_control_edge(g, d.node, c.node));
  assert_status(rf_graph_add_control_edge(g, c.node, d.node),
                RF_INVALID_ARGUMENT, "would create a cycle");
  assert_status(rf_graph_add_control_edge(g, NULL, d.node), RF_INVALID_ARGUMENT,
                NULL);
  rf_graph *other = rf_graph_new();
  rf_output o = src_node(other, "o", RF_FLOAT32, rf_shape_scalar());
  assert_status(rf_graph_add_control_edge(g, o.node, d.node),
                RF_INVALID_ARGUMENT, "not in this graph");
  /* Control inputs through the builder (duplicates dropped). */
  rf_node_builder *nb = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_input(nb, c);
  rf_node_builder_control_input(nb, d.node);
  rf_node_builder_control_input(nb, a.node);
  rf_node_builder_control_input(nb, d.node);
  rf_node *sink = NULL;
  assert_ok(rf_node_builder_finish(nb, &sink));
  assert_int_equal(rf_node_num_outputs(sink), 0);
  assert_int_equal(rf_node_num_control_inputs(sink), 2);
  assert_ptr_equal(rf_node_control_input(sink, 0), d.node);
  assert_ptr_equal(rf_node_control_input(sink, 1), a.node);
  assert_status(rf_graph_add_control_edge(g, sink, a.node), RF_INVALID_ARGUMENT,
                "would create a cycle");
  check_invariants(g);
  rf_graph_free(other);
  rf_graph_free(g);
}

static void test_edge_edits(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = src_node(g, "a", RF_FLOAT32, rf_shape_scalar());
  rf_output b = src_node(g, "b", RF_FLOAT32, rf_shape_scalar());
  rf_output s = add_node(g, "s", a, a);
  rf_output t = add_node(g, "t", s, b);
  assert_int_equal(a.node->num_out_edges, 2);
  /* Rewire s's input 1 from a to b. */
  assert_ok(rf__graph_update_edge(g, s.node, 1, b.node, 0));
  assert_ptr_equal(rf_node_input(s.node, 1).node, b.node);
  assert_int_equal(a.node->num_out_edges, 1);
  assert_int_equal(b.node->num_out_edges, 2);
  check_invariants(g);
  assert_status(rf__graph_update_edge(g, s.node, 2, b.node, 0),
                RF_INVALID_ARGUMENT, "has no input 2");
  assert_status(rf__graph_update_edge(g, s.node, 0, b.node, 1),
                RF_INVALID_ARGUMENT, "has no output 1");
  /* Remove an edge and feed the slot again. */
  rf__graph_remove_edge(g, t.node->data_in[0]);
  assert_null(rf_node_input(t.node, 0).node);
  assert_int_equal(s.node->num_out_edges, 0);
  check_invariants(g);
  assert_status(rf__graph_add_edge(g, a.node, 0, t.node, 1),
                RF_INVALID_ARGUMENT, "already fed");
  assert_ok(rf__graph_add_edge(g, a.node, 0, t.node, 0));
  assert_ptr_equal(rf_node_input(t.node, 0).node, a.node);
  assert_ok(
      rf__graph_add_edge(g, b.node, RF_CONTROL_SLOT, s.node, RF_CONTROL_SLOT));
  assert_ok(
      rf__graph_add_edge(g, b.node, RF_CONTROL_SLOT, s.node, RF_CONTROL_SLOT));
  assert_int_equal(rf_node_num_control_inputs(s.node), 1);
  assert_status(rf__graph_add_edge(g, b.node, 0, s.node, RF_CONTROL_SLOT),
                RF_INVALID_ARGUMENT, "mixes data and control");
  check_invariants(g);
  /* Remove a node with all its edges; its id stays a hole. */
  rf__graph_remove_node(g, s.node);
  assert_int_equal(rf_graph_num_nodes(g), 3);
  assert_null(g->nodes[2]);
  assert_null(rf_graph_find_node(g, "s"));
  assert_ptr_equal(rf_graph_node(g, 2), t.node);
  assert_null(rf_graph_node(g, 3));
  assert_int_equal(b.node->num_out_edges, 1);
  check_invariants(g);
  /* rf__graph_add_node resolves dtypes and runs the shape function. */
  const rf__op_def *add = rf__op_find("TestAdd");
  rf_output in[2] = {a, b};
  rf_node *n = NULL;
  assert_ok(rf__graph_add_node(g, add, NULL, "cpu:3", in, 2, NULL, &n));
  assert_string_equal(rf_node_name(n), "TestAdd");
  assert_string_equal(rf_node_device(n), "cpu:3");
  assert_int_equal(rf_output_dtype((rf_output){n, 0}), RF_FLOAT32);
  rf_shape sh = rf_output_shape((rf_output){n, 0});
  assert_int_equal(sh.rank, 0);
  assert_int_equal(n->id, 4);
  assert_status(rf__graph_add_node(g, add, "t", "", in, 2, NULL, &n),
                RF_ALREADY_EXISTS, "'t'");
  assert_status(rf__graph_add_node(g, add, NULL, "", in, 1, NULL, &n),
                RF_INVALID_ARGUMENT, "expected 2 inputs, got 1");
  rf_output three[3] = {a, b, a};
  rf__attrs attrs = {NULL, 0, 0};
  rf__attr_value t32 = rf__attr_type_value(RF_INT32);
  assert_ok(rf__attrs_set(&attrs, "T", &t32));
  const rf__op_def *cat = rf__op_find("TestConcat");
  assert_ok(rf__graph_add_node(g, cat, "cat", "", three, 3, &attrs, &n));
  rf__attrs_clear(&attrs);
  int64_t num;
  assert_ok(rf_node_attr_int(n, "N", &num));
  assert_int_equal(num, 3);
  assert_int_equal(rf_output_dtype((rf_output){n, 0}), RF_INT32);
  check_invariants(g);
  rf_graph_free(g);
}

static void assert_same_graph(const rf_graph *g, const rf_graph *c) {
  assert_int_equal(c->num_ids, g->num_ids);
  assert_int_equal(rf_graph_num_nodes(c), rf_graph_num_nodes(g));
  for (int i = 0; i < g->num_ids; i++) {
    const rf_node *a = g->nodes[i], *b = c->nodes[i];
    if (!a) {
      assert_null(b);
      continue;
    }
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_string_equal(a->name, b->name);
    assert_ptr_equal(a->op, b->op);
    assert_string_equal(a->requested_device, b->requested_device);
    assert_int_equal(a->assigned_device, b->assigned_device);
    assert_int_equal(a->num_inputs, b->num_inputs);
    assert_int_equal(a->num_outputs, b->num_outputs);
    for (int k = 0; k <= a->op->num_inputs; k++)
      assert_int_equal(a->arg_start[k], b->arg_start[k]);
    for (int k = 0; k < a->num_outputs; k++) {
      assert_int_equal(a->out_dtypes[k], b->out_dtypes[k]);
      assert_true(rf_shape_equal(&a->out_shapes[k], &b->out_shapes[k]));
    }
    assert_int_equal(a->attrs.n, b->attrs.n);
    for (int k = 0; k < a->attrs.n; k++) {
      assert_string_equal(a->attrs.items[k].name, b->attrs.items[k].name);
      assert_true(rf__attr_value_equal(&a->attrs.items[k].value,
                                       &b->attrs.items[k].value));
    }
    assert_int_equal(a->num_in_edges, b->num_in_edges);
    for (int k = 0; k < a->num_in_edges; k++) {
      assert_int_equal(a->in_edges[k]->src->id, b->in_edges[k]->src->id);
      assert_ptr_equal(b->in_edges[k]->src, c->nodes[a->in_edges[k]->src->id]);
      assert_int_equal(a->in_edges[k]->src_out, b->in_edges[k]->src_out);
      assert_int_equal(a->in_edges[k]->dst_in, b->in_edges[k]->dst_in);
    }
    assert_int_equal(a->num_out_edges, b->num_out_edges);
    for (int k = 0; k < a->num_out_edges; k++) {
      assert_int_equal(a->out_edges[k]->dst->id, b->out_edges[k]->dst->id);
      assert_int_equal(a->out_edges[k]->dst_in, b->out_edges[k]->dst_in);
    }
  }
}

/* A graph using every feature: lists, controls, devices, attrs, a hole. */
static rf_status *build_rich(rf_graph *g) {
  rf_node_builder *b = rf_node_builder_new(g, "TestSource", "x");
  rf_node_builder_attr_shape(b, "shape", rf_shape_of(2, 2, 2));
  rf_node *x = NULL, *y = NULL, *n = NULL;
  RF_CHECK(rf_node_builder_finish(b, &x));
  RF_CHECK(rf_graph_push_device(g, "gpu:1"));
  b = rf_node_builder_new(g, "TestSource", NULL);
  rf_node_builder_attr_shape(b, "shape", rf_shape_of(2, 3, 2));
  rf_status *st = rf_node_builder_finish(b, &y);
  rf_graph_pop_device(g);
  RF_CHECK(st);
  rf_output in[3] = {{x, 0}, {y, 0}, {x, 0}};
  b = rf_node_builder_new(g, "TestConcat", "cat");
  rf_node_builder_input_list(b, in, 3);
  rf_node_builder_control_input(b, y);
  RF_CHECK(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "TestOpts", "opts");
  int64_t dims[3] = {1, 2, 3};
  double rates[2] = {0.25, 4};
  rf_node_builder_attr_int_list(b, "dims", dims, 3);
  rf_node_builder_attr_float_list(b, "rates", rates, 2);
  rf_node_builder_attr_string(b, "mode", "max");
  rf_node_builder_device(b, "/device:CPU:2");
  RF_CHECK(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "TestAdd", "sum");
  rf_node_builder_input(b, in[0]);
  rf_node_builder_input(b, in[2]);
  RF_CHECK(rf_node_builder_finish(b, &n));
  RF_CHECK(rf_graph_add_control_edge(g, n, rf_graph_find_node(g, "opts")));
  b = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_input(b, (rf_output){rf_graph_find_node(g, "cat"), 0});
  RF_CHECK(rf_node_builder_finish(b, &n));
  return NULL;
}

static void test_copy(void **state) {
  rf_graph *g = rf_graph_new();
  assert_ok(build_rich(g));
  rf__graph_remove_node(g, rf_graph_find_node(g, "sink"));
  rf_graph_find_node(g, "sum")->assigned_device = 1;
  rf_graph *c = NULL;
  assert_ok(rf__graph_copy(g, &c));
  check_invariants(c);
  assert_same_graph(g, c);
  /* The copy is independent of the original. */
  rf__graph_remove_node(g, rf_graph_find_node(g, "cat"));
  rf_graph_free(g);
  check_invariants(c);
  assert_non_null(rf_graph_find_node(c, "cat"));
  rf_output s = src_node(c, NULL, RF_FLOAT32, rf_shape_scalar());
  assert_int_equal(s.node->id, c->num_ids - 1);
  check_invariants(c);
  assert_status(rf__graph_copy(NULL, &c), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(c);
}

/* Control edges have no slot to find their copy by: a sink with many control
 * inputs and a source with many control outputs keep both edge orders. */
static void test_copy_control_fans(void **state) {
  rf_graph *g = rf_graph_new();
  enum { N = 600 };
  rf_node *nodes[N];
  for (int i = 0; i < N; i++)
    nodes[i] = src_node(g, NULL, RF_FLOAT32, rf_shape_scalar()).node;
  rf_node *hub = src_node(g, "hub", RF_FLOAT32, rf_shape_scalar()).node;
  rf_node *sink = src_node(g, "sink", RF_FLOAT32, rf_shape_scalar()).node;
  /* In an order of their own, unlike ids: the copy must not sort. */
  for (int i = 0; i < N; i++) {
    int k = (int)((i * 7919L) % N);
    assert_ok(rf_graph_add_control_edge(g, nodes[k], sink));
    assert_ok(rf_graph_add_control_edge(g, hub, nodes[(k + 1) % N]));
    if (i % 3 == 0)
      add_node(g, NULL, (rf_output){nodes[k], 0}, (rf_output){hub, 0});
  }
  rf__graph_remove_node(g, nodes[5]); /* a hole */
  rf_graph *c = NULL;
  assert_ok(rf__graph_copy(g, &c));
  check_invariants(c);
  assert_same_graph(g, c);
  rf_graph_free(g);
  rf_graph_free(c);
}

/* A chain of n TestAdd nodes; the library allocations its copy makes. */
static int64_t copy_allocations(int n) {
  rf_graph *g = rf_graph_new();
  rf_output y = src_node(g, NULL, RF_FLOAT32, rf_shape_scalar());
  for (int i = 0; i < n; i++) y = add_node(g, NULL, y, y);
  rf_graph *c = NULL;
  int64_t before = rf_debug_allocation_count();
  assert_ok(rf__graph_copy(g, &c));
  int64_t used = rf_debug_allocation_count() - before;
  rf_graph_free(c);
  rf_graph_free(g);
  return used;
}

/* A compile copies the session's graph, so a copy must cost the same per
 * node at any size (docs/PERFORMANCE.md: the name hash rebuilt at every
 * copy, rehashing everything at each doubling, made it grow with the
 * graph). Counted without a clock: the same number of allocations for each
 * further 1000 nodes, none of them a table growing. */
static void test_copy_is_linear(void **state) {
  int64_t a[5];
  for (int i = 0; i < 5; i++) a[i] = copy_allocations(1000 * (i + 1));
  for (int i = 1; i < 4; i++)
    if (a[i + 1] - a[i] != a[1] - a[0])
      fail_msg(
          "copies of 1000..5000 nodes made %lld, %lld, %lld, %lld, %lld "
          "allocations: not the same number per 1000 nodes",
          (long long)a[0], (long long)a[1], (long long)a[2], (long long)a[3],
          (long long)a[4]);
}

/* The name index: lookups stay short (probing stays near each name's home
 * slot) for names that differ only at their end, and after removals. */
static void test_name_index(void **state) {
  enum { N = 100000 };
  static char names[N][320];
  rf_node **nodes = calloc(N, sizeof *nodes);
  rf_node *store = calloc(N, sizeof *store);
  assert_non_null(nodes);
  assert_non_null(store);
  char prefix[301];
  memset(prefix, 'p', 300);
  prefix[300] = '\0';
  rf__name_index x = {NULL, 0, 0};
  for (int i = 0; i < N; i++) {
    /* Half "Op_<i>" (generated names), half one long prefix and a number. */
    snprintf(names[i], sizeof names[i], "%s_%d", i % 2 ? "MatMul" : prefix, i);
    store[i].name = names[i];
    store[i].id = i;
    nodes[i] = &store[i];
    assert_int_equal(rf__name_index_add(&x, names[i], i), 0);
  }
  uint32_t max;
  uint64_t sum;
  rf__name_index_displacement(&x, &max, &sum);
  if (max > 64 || sum > (uint64_t)N)
    fail_msg(
        "%d names: a lookup probes up to %u slots past home (%.2f on "
        "average)",
        N, max, (double)sum / N);
  /* Remove every third name; the others stay found, the removed do not. */
  for (int i = 0; i < N; i += 3) rf__name_index_remove(&x, names[i], i);
  for (int i = 0; i < N; i++) {
    int want = i % 3 ? i : -1;
    assert_int_equal(rf__name_index_find(&x, nodes, names[i], strlen(names[i])),
                     want);
  }
  assert_int_equal(x.count, N - (N + 2) / 3);
  rf__name_index_displacement(&x, &max, &sum);
  assert_true(max <= 64 && sum <= (uint64_t)N);
  /* A copy answers the same. */
  rf__name_index y;
  assert_int_equal(rf__name_index_copy(&y, &x), 0);
  assert_int_equal(rf__name_index_find(&y, nodes, names[4], strlen(names[4])),
                   4);
  assert_int_equal(rf__name_index_find(&y, nodes, "MatMul", 6), -1);
  rf__name_index_free(&x);
  rf__name_index_free(&y);
  free(nodes);
  free(store);
}

static void test_sticky_errors(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = src_node(g, "x", RF_FLOAT32, rf_shape_scalar());
  rf_output none = {NULL, 0};
  assert_false(rf__graph_failed(g));
  assert_true(rf__graph_failed(NULL));
  assert_true(rf__graph_inputs_ok(g, "Add", "sum", &x, 1));
  assert_false(rf__graph_inputs_ok(g, "Add", "sum", &none, 1));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'sum' (Add): input 0 is invalid");
  rf_graph_clear_status(g);
  /* no name given; inside a device scope the device is named too */
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  assert_false(rf__graph_inputs_ok(g, "Add", NULL, &none, 1));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "a new Add node on cpu:1: input 0 is invalid");
  rf_graph_pop_device(g);
  rf_graph_clear_status(g);
  assert_null(rf_graph_status(g));
  rf_node_builder *b = rf_node_builder_new(g, "TestAdd", "bad");
  rf_node_builder_input(b, x);
  rf_output o = rf__finish_output(g, b);
  assert_null(o.node);
  assert_true(rf__graph_failed(g));
  /* Later errors and later nodes are dropped; the first error stays. */
  b = rf_node_builder_new(g, "NoSuchOp", NULL);
  assert_null(rf__finish_node(g, b));
  b = rf_node_builder_new(g, "TestSource", "later");
  o = rf__finish_output(g, b);
  assert_null(o.node);
  assert_null(rf_graph_find_node(g, "later"));
  assert_false(rf__graph_inputs_ok(g, "Add", NULL, &x, 1));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'bad' (TestAdd): expected 2 inputs");
  rf__graph_record(g, rf_status_new(RF_INTERNAL, "second"));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "node 'bad'");
  rf_graph_clear_status(g);
  b = rf_node_builder_new(g, "TestSource", "later");
  o = rf__finish_output(g, b);
  assert_non_null(o.node);
  assert_null(rf_graph_status(g));
  rf_graph *other = rf_graph_new();
  rf_output y = src_node(other, "y", RF_FLOAT32, rf_shape_scalar());
  assert_false(rf__graph_inputs_ok(g, "Neg", NULL, &y, 1));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "another graph");
  rf__graph_record(NULL, rf_status_new(RF_INTERNAL, "dropped"));
  rf_graph_free(other);
  rf_graph_free(g);
}

/* Fails the k-th allocation for k = 1, 2, ... until the build succeeds;
 * every failure must be RESOURCE_EXHAUSTED and leak nothing. */
static void test_allocation_failures(void **state) {
  int failures = 0;
  for (int k = 1;; k++) {
    int64_t live = rf_debug_live_allocations();
    rf_debug_fail_allocation_after(k);
    rf_graph *g = rf_graph_new();
    rf_status *st =
        g ? build_rich(g) : rf_status_new(RF_RESOURCE_EXHAUSTED, "g");
    rf_graph *c = NULL;
    if (!st) st = rf__graph_copy(g, &c);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      check_invariants(c);
      assert_same_graph(g, c);
      rf_graph_free(c);
      rf_graph_free(g);
      assert_int_equal(rf_debug_live_allocations(), live);
      break;
    }
    if (rf_status_code(st) != RF_RESOURCE_EXHAUSTED)
      fprintf(stderr, "k=%d: %s\n", k, rf_status_message(st));
    assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
    rf_status_free(st);
    if (g) check_invariants(g);
    rf_graph_free(g);
    assert_int_equal(rf_debug_live_allocations(), live);
    failures++;
  }
  assert_true(failures > 20);
}

static void test_null_arguments(void **state) {
  assert_int_equal(rf_graph_num_nodes(NULL), 0);
  assert_null(rf_graph_node(NULL, 0));
  assert_null(rf_graph_find_node(NULL, "x"));
  assert_string_equal(rf_node_name(NULL), "");
  assert_string_equal(rf_node_op(NULL), "");
  assert_string_equal(rf_node_device(NULL), "");
  assert_int_equal(rf_node_num_inputs(NULL), 0);
  assert_int_equal(rf_node_num_outputs(NULL), 0);
  assert_null(rf_node_input(NULL, 0).node);
  assert_int_equal(rf_node_num_control_inputs(NULL), 0);
  assert_null(rf_node_control_input(NULL, 0));
  assert_int_equal(rf_output_dtype((rf_output){NULL, 0}), RF_DTYPE_INVALID);
  assert_status(rf_node_set_device(NULL, "cpu"), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_graph_add_control_edge(NULL, NULL, NULL),
                RF_INVALID_ARGUMENT, NULL);
  rf_graph_clear_status(NULL);
  rf_graph_pop_device(NULL);
  rf_graph *g = rf_graph_new();
  assert_null(rf_graph_find_node(g, NULL));
  assert_null(rf_graph_node(g, -1));
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_graph),
      cmocka_unit_test(test_build_and_read),
      cmocka_unit_test(test_unique_names),
      cmocka_unit_test(test_device_scope),
      cmocka_unit_test(test_builder_errors),
      cmocka_unit_test(test_inference_and_defaults),
      cmocka_unit_test(test_const_input_values),
      cmocka_unit_test(test_control_edges_and_cycles),
      cmocka_unit_test(test_edge_edits),
      cmocka_unit_test(test_copy),
      cmocka_unit_test(test_copy_control_fans),
      cmocka_unit_test(test_copy_is_linear),
      cmocka_unit_test(test_name_index),
      cmocka_unit_test(test_sticky_errors),
      cmocka_unit_test(test_allocation_failures),
      cmocka_unit_test(test_null_arguments),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
