/* tests/test_null_args.c - every public function, given NULL or out-of-range
 * arguments, returns INVALID_ARGUMENT (or its documented neutral value) and
 * never crashes. Walks the headers in include/ringflow/ one by one. */
#include <stdlib.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "ringflow/graph_io.h"
#include "testutil.h"

#define INVALID(expr) assert_status((expr), RF_INVALID_ARGUMENT, NULL)
#define NO_OUTPUT(expr) assert_null((expr).node)

static void test_status_and_dtype(void **state) {
  assert_int_equal(rf_status_code(NULL), RF_OK);
  assert_string_equal(rf_status_message(NULL), "");
  rf_status_free(NULL);
  assert_null(rf_status_new(RF_OK, "fine"));
  assert_string_equal(rf_code_name((rf_code)-1), "UNKNOWN_CODE");
  assert_string_equal(rf_code_name(RF_CODE_COUNT), "UNKNOWN_CODE");
  assert_int_equal(rf_dtype_size(RF_DTYPE_INVALID), 0);
  assert_int_equal(rf_dtype_size((rf_dtype)99), 0);
  assert_string_equal(rf_dtype_name((rf_dtype)99), "invalid");
  assert_int_equal(rf_dtype_from_name(NULL), RF_DTYPE_INVALID);
  assert_int_equal(rf_dtype_from_name("float33"), RF_DTYPE_INVALID);
  assert_false(rf_dtype_is_float((rf_dtype)99));
  assert_false(rf_dtype_is_integer(RF_DTYPE_INVALID));
}

static void test_shapes(void **state) {
  rf_shape s = rf_shape_make(RF_MAX_RANK + 1, NULL);
  assert_int_equal(s.rank, RF_UNKNOWN_RANK);
  s = rf_shape_make(2, NULL);
  assert_int_equal(s.rank, RF_UNKNOWN_RANK);
  assert_false(rf_shape_is_fully_defined(NULL));
  assert_int_equal(rf_shape_num_elements(NULL), -1);
  assert_false(rf_shape_equal(NULL, &s));
  rf_shape_format(NULL, NULL, 0);
  char buf[4];
  rf_shape_format(NULL, buf, sizeof buf);
  s = rf_shape_from_array(NULL);
  assert_int_equal(s.rank, RF_UNKNOWN_RANK);
}

static void test_tensors(void **state) {
  rf_tensor *t = NULL;
  rf_shape s = rf_shape_of(1, 3), unknown = rf_shape_of(1, -1);
  INVALID(rf_tensor_new(RF_FLOAT32, NULL, NULL, &t));
  INVALID(rf_tensor_new(RF_FLOAT32, &s, NULL, NULL));
  INVALID(rf_tensor_new(RF_DTYPE_INVALID, &s, NULL, &t));
  INVALID(rf_tensor_new(RF_FLOAT32, &unknown, NULL, &t));
  INVALID(rf_tensor_new_copy(RF_FLOAT32, &s, NULL, &t));
  INVALID(rf_tensor_new_scalar(RF_RESOURCE, 1, &t));
  assert_null(t);
  assert_null(rf_tensor_retain(NULL));
  rf_tensor_release(NULL);
  assert_int_equal(rf_tensor_dtype(NULL), RF_DTYPE_INVALID);
  assert_int_equal(rf_tensor_shape(NULL).rank, RF_UNKNOWN_RANK);
  assert_int_equal(rf_tensor_num_elements(NULL), -1);
  assert_int_equal(rf_tensor_nbytes(NULL), 0);
  assert_null(rf_tensor_data(NULL));
  assert_null(rf_tensor_mutable_data(NULL));
  assert_true(rf_tensor_get(NULL, 0) == 0.0);
  rf_tensor_set(NULL, 0, 1.0);
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &t));
  rf_tensor_set(t, -1, 1.0); /* out of range: ignored */
  rf_tensor_set(t, 3, 1.0);
  assert_true(rf_tensor_get(t, 3) == 0.0);
  assert_true(rf_tensor_get(t, -1) == 0.0);
  rf_tensor_release(t);
  rf_default_allocator_stats(NULL, NULL);
}

static void test_graph_functions(void **state) {
  INVALID(rf_graph_status(NULL));
  rf_graph_free(NULL);
  rf_graph_clear_status(NULL);
  INVALID(rf_graph_push_device(NULL, "cpu:0"));
  rf_graph_pop_device(NULL);
  assert_int_equal(rf_graph_num_nodes(NULL), 0);
  assert_null(rf_graph_find_node(NULL, "x"));
  assert_null(rf_graph_node(NULL, 0));
  rf_graph *g = rf_graph_new();
  INVALID(rf_graph_push_device(g, NULL));
  INVALID(rf_graph_push_device(g, "tpu:0"));
  rf_graph_pop_device(g); /* nothing pushed: ignored */
  assert_null(rf_graph_find_node(g, NULL));
  assert_null(rf_graph_node(g, -1));
  assert_null(rf_graph_node(g, 5));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 2));
  assert_string_equal(rf_node_name(NULL), "");
  assert_string_equal(rf_node_op(NULL), "");
  assert_string_equal(rf_node_device(NULL), "");
  assert_int_equal(rf_node_num_inputs(NULL), 0);
  assert_int_equal(rf_node_num_outputs(NULL), 0);
  NO_OUTPUT(rf_node_input(NULL, 0));
  NO_OUTPUT(rf_node_input(x.node, 0));
  NO_OUTPUT(rf_node_input(x.node, -1));
  assert_int_equal(rf_node_num_control_inputs(NULL), 0);
  assert_null(rf_node_control_input(NULL, 0));
  assert_null(rf_node_control_input(x.node, 0));
  rf_output bad = {NULL, 0}, out_of_range = {x.node, 7};
  assert_int_equal(rf_output_dtype(bad), RF_DTYPE_INVALID);
  assert_int_equal(rf_output_dtype(out_of_range), RF_DTYPE_INVALID);
  assert_int_equal(rf_output_shape(bad).rank, RF_UNKNOWN_RANK);
  INVALID(rf_node_set_device(NULL, "cpu:0"));
  INVALID(rf_node_set_device(x.node, "cpu:x"));
  INVALID(rf_graph_add_control_edge(NULL, x.node, x.node));
  INVALID(rf_graph_add_control_edge(g, NULL, x.node));
  INVALID(rf_graph_add_control_edge(g, x.node, NULL));
  int64_t i;
  double f;
  bool b;
  const char *str;
  rf_dtype dt;
  rf_shape sh;
  INVALID(rf_node_attr_int(NULL, "a", &i));
  INVALID(rf_node_attr_int(x.node, NULL, &i));
  INVALID(rf_node_attr_float(x.node, "dtype", NULL));
  INVALID(rf_node_attr_float(NULL, "a", &f));
  INVALID(rf_node_attr_bool(NULL, "a", &b));
  INVALID(rf_node_attr_string(NULL, "a", &str));
  INVALID(rf_node_attr_dtype(NULL, "a", &dt));
  INVALID(rf_node_attr_shape(NULL, "a", &sh));
  INVALID(rf_node_attr_int(x.node, "dtype", &i)); /* wrong type */
  assert_status(rf_node_attr_int(x.node, "nope", &i), RF_NOT_FOUND, "nope");
  rf_graph_free(g);
}

static void test_node_builder(void **state) {
  /* NULL graph: the builder still exists and finish reports the error */
  rf_node_builder *b = rf_node_builder_new(NULL, "Identity", NULL);
  assert_non_null(b);
  rf_node *n = NULL;
  INVALID(rf_node_builder_finish(b, &n));
  assert_null(n);
  rf_graph *g = rf_graph_new();
  b = rf_node_builder_new(g, NULL, NULL);
  INVALID(rf_node_builder_finish(b, &n));
  INVALID(rf_node_builder_finish(NULL, &n));
  b = rf_node_builder_new(g, "Placeholder", "p");
  rf_node_builder_attr_dtype(b, "dtype", RF_FLOAT32);
  rf_node_builder_attr_int_list(b, "x", NULL, 3); /* bad list */
  INVALID(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "Placeholder", "p");
  rf_node_builder_attr_string(b, "s", NULL);
  INVALID(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "Placeholder", "p");
  rf_node_builder_attr_tensor(b, "value", NULL);
  INVALID(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "Identity", "i");
  rf_output none = {NULL, 0};
  rf_node_builder_input(b, none);
  INVALID(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "AddN", "a");
  rf_node_builder_input_list(b, NULL, 2);
  INVALID(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "NoOp", "c");
  rf_node_builder_control_input(b, NULL);
  INVALID(rf_node_builder_finish(b, &n));
  b = rf_node_builder_new(g, "NoOp", "d");
  rf_node_builder_device(b, "gpu:-1");
  INVALID(rf_node_builder_finish(b, &n));
  /* setters on NULL builders are ignored */
  rf_node_builder_input(NULL, none);
  rf_node_builder_input_list(NULL, NULL, 0);
  rf_node_builder_control_input(NULL, NULL);
  rf_node_builder_device(NULL, NULL);
  rf_node_builder_attr_int(NULL, "a", 1);
  rf_node_builder_attr_float(NULL, "a", 1);
  rf_node_builder_attr_bool(NULL, "a", true);
  rf_node_builder_attr_string(NULL, "a", "s");
  rf_node_builder_attr_dtype(NULL, "a", RF_FLOAT32);
  rf_node_builder_attr_shape(NULL, "a", rf_shape_scalar());
  rf_node_builder_attr_tensor(NULL, "a", NULL);
  rf_node_builder_attr_int_list(NULL, "a", NULL, 0);
  rf_node_builder_attr_float_list(NULL, "a", NULL, 0);
  assert_int_equal(rf_graph_num_nodes(g), 0);
  rf_graph_free(g);
}

/* Op functions: a NULL graph gives the invalid output; an invalid input
 * records INVALID_ARGUMENT in the graph. */
static void test_op_functions(void **state) {
  rf_output none = {NULL, 0};
  NO_OUTPUT(rf_const(NULL, NULL, NULL));
  NO_OUTPUT(rf_const_scalar(NULL, NULL, RF_FLOAT32, 1));
  NO_OUTPUT(rf_placeholder(NULL, NULL, RF_FLOAT32, rf_shape_scalar()));
  NO_OUTPUT(rf_identity(NULL, NULL, none));
  assert_null(rf_noop(NULL, NULL));
  NO_OUTPUT(rf_variable(NULL, NULL, RF_FLOAT32, rf_shape_scalar()));
  NO_OUTPUT(rf_read_variable(NULL, NULL, none));
  assert_null(rf_assign(NULL, NULL, none, none));
  assert_null(rf_apply_gradient_descent(NULL, NULL, none, none, none));
  assert_null(rf_apply_adam(NULL, NULL, none, none, none, none, none, none,
                            none, none, none, none));
  assert_null(rf_apply_adamw(NULL, NULL, none, none, none, none, none, none,
                             none, none, none, none, none));
  assert_null(
      rf_apply_momentum(NULL, NULL, none, none, none, none, none, false));
  NO_OUTPUT(rf_strided_slice(NULL, NULL, none, NULL, NULL, NULL, 0, 0, 0, 0));
  NO_OUTPUT(rf_add(NULL, NULL, none, none));
  NO_OUTPUT(rf_sub(NULL, NULL, none, none));
  NO_OUTPUT(rf_mul(NULL, NULL, none, none));
  NO_OUTPUT(rf_div(NULL, NULL, none, none));
  NO_OUTPUT(rf_neg(NULL, NULL, none));
  NO_OUTPUT(rf_add_n(NULL, NULL, NULL, 0));
  NO_OUTPUT(rf_matmul(NULL, NULL, none, none, false, false));
  NO_OUTPUT(rf_cast(NULL, NULL, none, RF_FLOAT32));
  NO_OUTPUT(rf_equal(NULL, NULL, none, none));
  NO_OUTPUT(rf_bias_add(NULL, NULL, none, none));
  NO_OUTPUT(rf_relu(NULL, NULL, none));
  NO_OUTPUT(rf_sigmoid(NULL, NULL, none));
  NO_OUTPUT(rf_tanh(NULL, NULL, none));
  NO_OUTPUT(rf_softmax(NULL, NULL, none));
  NO_OUTPUT(rf_sparse_softmax_cross_entropy(NULL, NULL, none, none));
  NO_OUTPUT(rf_sum(NULL, NULL, none, NULL, -1, false));
  NO_OUTPUT(rf_mean(NULL, NULL, none, NULL, -1, false));
  NO_OUTPUT(rf_argmax(NULL, NULL, none, 0));
  NO_OUTPUT(rf_reshape(NULL, NULL, none, none));
  NO_OUTPUT(rf_reshape_to(NULL, NULL, none, 0, NULL));
  NO_OUTPUT(rf_shape_of_op(NULL, NULL, none, RF_INT32));
  NO_OUTPUT(rf_fill(NULL, NULL, none, none));
  NO_OUTPUT(rf_zeros_like(NULL, NULL, none));
  NO_OUTPUT(rf_ones_like(NULL, NULL, none));
  NO_OUTPUT(rf_all_reduce(NULL, NULL, none, RF_REDUCE_SUM, 2, "s"));
  NO_OUTPUT(rf_all_gather(NULL, NULL, none, 2, "s"));
  NO_OUTPUT(rf_reduce_scatter(NULL, NULL, none, RF_REDUCE_SUM, 2, "s"));
  NO_OUTPUT(rf_reduce(NULL, NULL, NULL, 0, RF_REDUCE_SUM));
  NO_OUTPUT(rf_broadcast(NULL, NULL, none));
  rf_all_reduce_n(NULL, NULL, NULL, 0, RF_REDUCE_SUM, NULL);
  rf_all_gather_n(NULL, NULL, NULL, 0, NULL);
  rf_reduce_scatter_n(NULL, NULL, NULL, 0, RF_REDUCE_SUM, NULL);

  rf_graph *g = rf_graph_new();
  NO_OUTPUT(rf_relu(g, NULL, none));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "Relu");
  rf_graph_clear_status(g);
  NO_OUTPUT(rf_const(g, NULL, NULL));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_clear_status(g);
  NO_OUTPUT(rf_add_n(g, NULL, NULL, 0));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_clear_status(g);
  rf_output outs[2];
  rf_all_reduce_n(g, "x", NULL, 2, RF_REDUCE_SUM, outs);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_clear_status(g);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 2));
  NO_OUTPUT(rf_all_reduce(g, NULL, x, (rf_reduction)42, 2, "s"));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, NULL);
  rf_graph_free(g);
}

static void test_session_and_gradients(void **state) {
  rf_session *s = NULL;
  rf_session_options_init(NULL);
  INVALID(rf_session_new(NULL, NULL, &s));
  rf_graph *g = rf_graph_new();
  INVALID(rf_session_new(g, NULL, NULL));
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 0;
  INVALID(rf_session_new(g, &o, &s));
  o.num_cpu_devices = 65;
  INVALID(rf_session_new(g, &o, &s));
  rf_session_options_init(&o);
  o.default_device = "cpu:9";
  INVALID(rf_session_new(g, &o, &s));
  rf_session_options_init(&o);
  o.num_threads = -1;
  INVALID(rf_session_new(g, &o, &s));
  assert_null(s);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(1, 2));
  rf_output y = rf_relu(g, "y", x);
  assert_ok(rf_session_new(g, NULL, &s));
  rf_tensor *out = NULL;
  INVALID(rf_session_run(NULL, NULL, 0, &y, 1, NULL, 0, &out));
  INVALID(rf_session_run(s, NULL, 1, &y, 1, NULL, 0, &out));
  INVALID(rf_session_run(s, NULL, 0, NULL, 1, NULL, 0, &out));
  INVALID(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, NULL));
  INVALID(rf_session_run(s, NULL, 0, &y, -1, NULL, 0, &out));
  INVALID(rf_session_run(s, NULL, 0, NULL, 0, NULL, 1, NULL));
  rf_feed bad = {x, NULL};
  INVALID(rf_session_run(s, &bad, 1, &y, 1, NULL, 0, &out));
  assert_null(out);
  rf_session_free(s);
  rf_session_free(NULL);
  rf_output dx;
  INVALID(rf_gradients(NULL, &y, 1, &x, 1, NULL, &dx));
  INVALID(rf_gradients(g, NULL, 1, &x, 1, NULL, &dx));
  INVALID(rf_gradients(g, &y, 1, NULL, 1, NULL, &dx));
  INVALID(rf_gradients(g, &y, 1, &x, 1, NULL, NULL));
  INVALID(rf_gradients(g, &y, 0, &x, 1, NULL, &dx));
  rf_graph *lowered = NULL;
  INVALID(rf_graph_lower(NULL, NULL, &lowered));
  INVALID(rf_graph_lower(g, NULL, NULL));
  rf_graph_free(g);
}

static void test_graph_files(void **state) {
  char *text = NULL;
  rf_graph *g = NULL;
  INVALID(rf_graph_to_json(NULL, &text));
  INVALID(rf_graph_from_json(NULL, 0, &g));
  INVALID(rf_graph_from_json("{}", 2, NULL));
  INVALID(rf_graph_save(NULL, "/tmp/x"));
  INVALID(rf_graph_load(NULL, &g));
  INVALID(rf_graph_to_dot(NULL, &text));
  assert_null(text);
  assert_null(g);
  rf_string_free(NULL);
}

/* A refusal names the node the call would have made (its name, or "a new
 * OP node" without one), its op and the device scope, and adds no node. */
static void expect_refused(rf_graph *g, int nodes, const char *want) {
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, want);
  assert_int_equal(rf_graph_num_nodes(g), nodes);
  rf_graph_clear_status(g);
}

static void test_refusals_name_the_node(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(4, 1, 4, 4, 1));
  rf_output f = rf_placeholder(g, "f", RF_FLOAT32, rf_shape_of(4, 1, 1, 1, 1));
  rf_output bad = {NULL, 0};
  int n = rf_graph_num_nodes(g);
  NO_OUTPUT(rf_add_n(g, "total", NULL, 0));
  expect_refused(g, n, "node 'total' (AddN): needs at least one input, got 0");
  NO_OUTPUT(rf_concat(g, NULL, NULL, 0, 0));
  expect_refused(g, n, "a new Concat node: needs n >= 1 values, got 0");
  static const int64_t ones[4] = {1, 1, 1, 1};
  NO_OUTPUT(rf_conv2d(g, "conv1", x, f, NULL, "SAME", NULL));
  expect_refused(g, n,
                 "node 'conv1' (Conv2D): strides and padding are "
                 "required (got no strides)");
  NO_OUTPUT(rf_max_pool(g, "pool1", x, NULL, ones, "SAME"));
  expect_refused(g, n, "node 'pool1' (MaxPool): ksize is required");
  assert_ok(rf_graph_push_device(g, "cpu:2"));
  NO_OUTPUT(rf_add(g, "plus", x, bad));
  expect_refused(g, n, "node 'plus' (Add) on cpu:2: input 1 is invalid");
  NO_OUTPUT(rf_reduce(g, NULL, NULL, 0, RF_REDUCE_SUM));
  expect_refused(g, n, "a new Reduce node on cpu:2: need n >= 1 inputs");
  rf_graph_pop_device(g);
  NO_OUTPUT(rf_slice(g, "cut", x, NULL, ones, 4));
  expect_refused(g, n, "node 'cut' (Slice): begin must hold n >= 0 entries");
  rf_all_reduce_n(g, "sum_all", &x, 1, RF_REDUCE_SUM, NULL);
  expect_refused(g, n, "node 'sum_all' (AllReduce): need n >= 1 inputs");
  /* rf_reshape_to makes a shape Const first: a refused Reshape takes it back */
  static const int64_t nine[2] = {3, 3};
  NO_OUTPUT(rf_reshape_to(g, "r", x, 2, nine));
  expect_refused(g, n, "node 'r' (Reshape): cannot reshape");
  /* a long name is cut in the message */
  char *longname = malloc(10001);
  assert_non_null(longname);
  memset(longname, 'n', 10000);
  longname[10000] = 0;
  NO_OUTPUT(rf_add_n(g, longname, NULL, 0));
  rf_status *st = rf_graph_status(g);
  assert_true(strlen(rf_status_message(st)) < 1000);
  rf_status_free(st);
  expect_refused(g, n, "(AddN): needs at least one input");
  free(longname);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_and_dtype),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_tensors),
      cmocka_unit_test(test_graph_functions),
      cmocka_unit_test(test_node_builder),
      cmocka_unit_test(test_op_functions),
      cmocka_unit_test(test_session_and_gradients),
      cmocka_unit_test(test_graph_files),
      cmocka_unit_test(test_refusals_name_the_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
