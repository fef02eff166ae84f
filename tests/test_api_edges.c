/* tests/test_api_edges.c - edges of the graph-building API that a user
 * reaches from the headers alone: a device scope stack already full when
 * rf_gradients runs (its nodes still get their forward nodes' devices, the
 * values match a float64 reference, the caller's stack comes back whole), and
 * input lists whose count would overflow int (refused, never a hang or a
 * write past the builder's array); op functions that fail before their node
 * is built name it all the same; control edge errors name the node at fault
 * with its op and device. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringflow/debug.h"
#include "testutil.h"

#define MAX_SCOPE 32 /* rf_graph_push_device's limit (ringflow/graph.h) */

/* Gradient nodes take their forward node's device whatever the caller has
 * pushed, even a stack 32 deep; the stack is the same afterwards. */
static void test_gradients_under_full_scope(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, 3, 5);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, s);
  rf_output y = rf_sum(g, "y", rf_tanh(g, "t", x), NULL, -1, false);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  char dev[16];
  for (int i = 0; i < MAX_SCOPE; i++) {
    snprintf(dev, sizeof dev, "cpu:%d", i % 2 ? 0 : 2);
    assert_ok(rf_graph_push_device(g, dev));
  }
  assert_status(rf_graph_push_device(g, "cpu:0"), RF_INVALID_ARGUMENT,
                "deeper than 32");
  rf_output dx = {NULL, 0};
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_non_null(dx.node);
  assert_string_equal(rf_node_device(dx.node), "cpu:1");
  /* The caller's stack is intact: the innermost scope is "cpu:0" (pushed
   * last), and 31 more pops get back to "cpu:2" then none. */
  assert_non_null(rf_noop(g, "in_scope"));
  assert_string_equal(rf_node_device(rf_graph_find_node(g, "in_scope")),
                      "cpu:0");
  for (int i = 0; i < MAX_SCOPE - 1; i++) rf_graph_pop_device(g);
  assert_non_null(rf_noop(g, "outer"));
  assert_string_equal(rf_node_device(rf_graph_find_node(g, "outer")), "cpu:2");
  rf_graph_pop_device(g);
  rf_graph_pop_device(g); /* one too many: does nothing */
  assert_non_null(rf_noop(g, "none"));
  assert_string_equal(rf_node_device(rf_graph_find_node(g, "none")), "");
  assert_graph_ok(g);

  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, s, -2, 2);
  rf_feed f = {x, xv};
  rf_tensor *out = NULL;
  rf_test_run(g, 3, &f, 1, &dx, 1, &out);
  double want[15];
  for (int i = 0; i < 15; i++) {
    double t = tanh(rf_tensor_get(xv, i));
    want[i] = 1 - t * t;
  }
  assert_tensor_near(out, s, want, 1e-12);
  rf_tensor_release(out);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

/* Runs rf_node_builder_input_list(b, x, n) for an AddN after `before` single
 * inputs, in a child process (a hang or crash must fail the test, not stop
 * it); the child exits 0 when finish returns `code` and added nothing. */
static void expect_input_list_refused(int before, int n, rf_code code) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* cmocka's handlers would carry a crash back into the test runner */
    int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
      signal(sigs[i], SIG_DFL);
    alarm(20);
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 2));
    int nodes = rf_graph_num_nodes(g);
    rf_node_builder *b = rf_node_builder_new(g, "AddN", "sum");
    for (int i = 0; i < before; i++) rf_node_builder_input(b, x);
    /* x is one output, not n: the builder must refuse before reading */
    if (code == RF_RESOURCE_EXHAUSTED) rf_debug_fail_allocation_after(1);
    rf_node_builder_input_list(b, &x, n);
    rf_debug_fail_allocation_after(0);
    rf_node *node = NULL;
    rf_status *st = rf_node_builder_finish(b, &node);
    bool ok =
        rf_status_code(st) == code && !node && rf_graph_num_nodes(g) == nodes;
    if (!ok)
      fprintf(stderr, "got %s: %s\n", rf_code_name(rf_status_code(st)),
              rf_status_message(st));
    rf_status_free(st);
    rf_graph_free(g);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("input list of %d after %d: child %s %d", n, before,
             WIFSIGNALED(status) ? "killed by signal" : "exited with",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* A count past what an int holds is refused; a huge one that fits is
 * RESOURCE_EXHAUSTED when its memory cannot be had (the array's growth once
 * doubled past INT_MAX and spun forever). */
static void test_input_list_counts(void **state) {
  (void)state;
  expect_input_list_refused(1, 0x7fffffff, RF_INVALID_ARGUMENT);
  expect_input_list_refused(3, 0x7ffffffd, RF_INVALID_ARGUMENT);
  expect_input_list_refused(0, (1 << 30) + 1, RF_RESOURCE_EXHAUSTED);
  expect_input_list_refused(0, 0x7fffffff, RF_RESOURCE_EXHAUSTED);
}

/* g's error (cleared afterwards) has `code` and holds `sub`. */
static void expect_graph_error(rf_graph *g, rf_code code, const char *sub) {
  assert_status(rf_graph_status(g), code, sub);
  rf_graph_clear_status(g);
}

/* Op functions that make a tensor before their node name the node they
 * would have made, its op and the device scope when that fails, as every
 * refusal does (ringflow/graph.h, rf_graph_status); they said only
 * "rf_const_scalar: ..." or "rf_reshape_to: ...". */
static void test_refusals_before_the_node(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 6));
  int nodes = rf_graph_num_nodes(g);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  assert_null(rf_const_scalar(g, "c", (rf_dtype)-3, 1.0).node);
  expect_graph_error(g, RF_INVALID_ARGUMENT, "node 'c' (Const) on cpu:1: ");
  assert_null(rf_const_scalar(g, NULL, RF_DTYPE_COUNT, 1.0).node);
  expect_graph_error(g, RF_INVALID_ARGUMENT, "a new Const node on cpu:1: ");
  rf_graph_pop_device(g);
  assert_null(rf_const_scalar(g, NULL, RF_DTYPE_INVALID, 1.0).node);
  expect_graph_error(g, RF_INVALID_ARGUMENT, "a new Const node: ");
  /* rf_reshape_to's shape tensor is its first allocation */
  int64_t dims[2] = {2, 3};
  rf_debug_fail_allocation_once(1);
  rf_output r = rf_reshape_to(g, "r", x, 2, dims);
  rf_debug_fail_allocation_once(0);
  assert_null(r.node);
  expect_graph_error(g, RF_RESOURCE_EXHAUSTED, "node 'r' (Reshape): ");
  assert_int_equal(rf_graph_num_nodes(g), nodes);
  assert_non_null(rf_reshape_to(g, "r", x, 2, dims).node);
  assert_graph_ok(g);
  rf_graph_free(g);
}

/* Control edge errors name the node at fault with its op and device, and
 * the message stays short whatever the names: "node 'a' or 'b' is not in
 * this graph" did not say which, and neither message named an op. */
static void test_control_edge_messages(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new(), *other = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:2"));
  rf_node *a = rf_noop(g, "a");
  rf_graph_pop_device(g);
  rf_node *b = rf_noop(g, "b");
  char *huge = malloc(5000);
  assert_non_null(huge);
  memset(huge, 'h', 4999);
  huge[4999] = '\0';
  assert_ok(rf_graph_push_device(other, "/task:1/cpu:0"));
  rf_node *o = rf_noop(other, huge);
  rf_graph_pop_device(other);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(o);
  assert_ok(rf_graph_add_control_edge(g, a, b));
  assert_ok(rf_graph_add_control_edge(g, a, b)); /* already there */
  assert_int_equal(rf_node_num_control_inputs(b), 1);
  assert_status(rf_graph_add_control_edge(g, b, a), RF_INVALID_ARGUMENT,
                "control edge from node 'b' (NoOp) to node 'a' (NoOp on "
                "cpu:2) would create a cycle");
  assert_status(rf_graph_add_control_edge(g, a, a), RF_INVALID_ARGUMENT,
                "from node 'a' (NoOp on cpu:2) to node 'a' (NoOp on cpu:2)");
  assert_status(rf_graph_add_control_edge(g, a, o), RF_INVALID_ARGUMENT,
                "the destination, node 'hhh");
  rf_status *st = rf_graph_add_control_edge(g, o, b);
  assert_non_null(st);
  const char *m = rf_status_message(st);
  assert_non_null(strstr(m, "the source, node 'hhh"));
  assert_non_null(strstr(m, "... (4999 bytes)' (NoOp on /task:1/cpu:0)"));
  assert_true(strlen(m) < 2 * RF_STATUS_QUOTE_MAX);
  rf_status_free(st);
  assert_status(rf_graph_add_control_edge(g, NULL, b), RF_INVALID_ARGUMENT,
                "NULL source node");
  assert_status(rf_graph_add_control_edge(g, a, NULL), RF_INVALID_ARGUMENT,
                "NULL destination node");
  assert_int_equal(rf_node_num_control_inputs(a), 0);
  assert_int_equal(rf_node_num_control_inputs(b), 1);
  free(huge);
  rf_graph_free(other);
  rf_graph_free(g);
}

/* finish's message names the node and op whatever went wrong, also when a
 * setter saw the problem (ringflow/graph.h, rf_node_builder_finish): these
 * said only "node builder 'NoOp': ..." or "Op type not registered 'X'". */
static void expect_builder_error(rf_node_builder *b, rf_code code,
                                 const char *node, const char *why) {
  rf_node *n = (rf_node *)&n, *sentinel = n;
  rf_status *st = rf_node_builder_finish(b, &n);
  assert_int_equal(rf_status_code(st), code);
  const char *m = rf_status_message(st);
  if (!strstr(m, node) || !strstr(m, why))
    fail_msg("'%s' does not name %s and say %s", m, node, why);
  assert_ptr_equal(n, sentinel);
  rf_status_free(st);
}

static void test_builder_errors_name_the_node(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 2));
  rf_node_builder *b = rf_node_builder_new(g, "NoSuchOp", "nso");
  expect_builder_error(b, RF_NOT_FOUND, "node 'nso'",
                       "Op type not registered 'NoSuchOp'");
  b = rf_node_builder_new(g, "AddN", "sum");
  rf_node_builder_input_list(b, &x, -1);
  expect_builder_error(b, RF_INVALID_ARGUMENT, "node 'sum' (AddN)",
                       "bad input list");
  b = rf_node_builder_new(g, "NoOp", "l");
  rf_node_builder_attr_int_list(b, "v", NULL, 3);
  expect_builder_error(b, RF_INVALID_ARGUMENT, "node 'l' (NoOp)",
                       "bad list for attr 'v'");
  b = rf_node_builder_new(g, "NoOp", "s");
  rf_node_builder_attr_string(b, "v", NULL);
  expect_builder_error(b, RF_INVALID_ARGUMENT, "node 's' (NoOp)",
                       "attr 'v' is a NULL string");
  b = rf_node_builder_new(g, "NoOp", "a");
  rf_node_builder_attr_int(b, NULL, 1);
  expect_builder_error(b, RF_INVALID_ARGUMENT, "node 'a' (NoOp)",
                       "NULL attr name");
  assert_ok(rf_graph_push_device(g, "cpu:2"));
  b = rf_node_builder_new(g, "NoOp", NULL); /* no name chosen yet */
  rf_node_builder_attr_float_list(b, "v", NULL, -1);
  expect_builder_error(b, RF_INVALID_ARGUMENT, "a new NoOp node on cpu:2",
                       "bad list for attr 'v'");
  rf_graph_pop_device(g);
  assert_int_equal(rf_graph_num_nodes(g), 1);
  rf_graph_free(g);
}

/* A tensor in device memory (rf_tensor_new_external_gpu) has no host data:
 * as a Const's value it was taken, and rf_graph_to_json then read its NULL
 * host pointer (SIGSEGV) and a CPU session handed it out as a fetched
 * "host" tensor. Tensor attrs now refuse it. */
static void test_const_refuses_device_tensor(void **state) {
  (void)state;
  static float mem[4] __attribute__((aligned(64)));
  rf_shape s = rf_shape_of(1, 4);
  rf_tensor *t;
  assert_ok(rf_tensor_new_external_gpu(RF_FLOAT32, &s, 0, mem, NULL, NULL, &t));
  rf_graph *g = rf_graph_new();
  assert_null(rf_const(g, "k", t).node);
  expect_graph_error(g, RF_INVALID_ARGUMENT, "node 'k' (Const): attr 'value'");
  rf_node_builder *b = rf_node_builder_new(g, "Const", "k2");
  rf_node_builder_attr_tensor(b, "value", t);
  rf_node_builder_attr_dtype(b, "dtype", RF_FLOAT32);
  expect_builder_error(b, RF_INVALID_ARGUMENT, "node 'k2' (Const)",
                       "device memory");
  assert_int_equal(rf_graph_num_nodes(g), 0);
  char *json = NULL;
  assert_ok(rf_graph_to_json(g, &json));
  rf_string_free(json);
  rf_graph_free(g);
  rf_tensor_release(t);
}

/* rf_session_run's argument refusals name the argument. */
static void test_run_names_its_bad_argument(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rf_const_scalar(g, "c", RF_FLOAT32, 1.0);
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, NULL, &s));
  rf_tensor *out[1] = {NULL};
  rf_feed feed = {c, NULL};
  rf_node *t = c.node;
  static const struct {
    int who, nfeeds, nfetches, ntargets;
    const char *want;
  } cases[] = {
      {0, 0, 1, 0, "session is NULL"},
      {1, -1, 0, 0, "nfeeds is negative"},
      {1, 0, -2, 0, "nfetches is negative"},
      {1, 0, 0, -1, "ntargets is negative"},
      {2, 1, 0, 0, "feeds is NULL"},
      {3, 0, 1, 0, "fetches is NULL"},
      {4, 0, 1, 0, "outputs is NULL"},
      {5, 0, 0, 1, "targets is NULL"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    int w = cases[k].who;
    rf_status *st = rf_session_run(w == 0 ? NULL : s, w == 2 ? NULL : &feed,
                                   cases[k].nfeeds, w == 3 ? NULL : &c,
                                   cases[k].nfetches, w == 5 ? NULL : &t,
                                   cases[k].ntargets, w == 4 ? NULL : out);
    assert_status(st, RF_INVALID_ARGUMENT, cases[k].want);
    assert_null(out[0]);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* A status made with an empty or NULL format holds an empty message (the
 * formatter's buffer was left unterminated: ASan read past it). */
static void test_status_with_an_empty_message(void **state) {
  const char *fmts[] = {"", NULL};
  for (int k = 0; k < 2; k++) {
    rf_status *st = rf_status_new(RF_INTERNAL, fmts[k]);
    assert_non_null(st);
    assert_int_equal(rf_status_code(st), RF_INTERNAL);
    assert_string_equal(rf_status_message(st), "");
    rf_status_free(st);
  }
}

/* printf-style, wide strings too: %ls used to stop the message there, every
 * argument after it dropped; a long one is capped as %s is. */
static void test_status_with_wide_strings(void **state) {
  rf_status *st =
      rf_status_new(RF_INTERNAL, "kernel %d failed on %ls (%s) %lc%.2ls", 3,
                    L"cpu:0", "x", (wint_t)L'!', L"abc");
  assert_string_equal(rf_status_message(st),
                      "kernel 3 failed on cpu:0 (x) !ab");
  rf_status_free(st);
  wchar_t wide[300];
  for (int i = 0; i < 299; i++) wide[i] = L'w';
  wide[299] = 0;
  st = rf_status_new(RF_INTERNAL, "%ls|", wide);
  assert_non_null(strstr(rf_status_message(st), "... (299 bytes)|"));
  rf_status_free(st);
}

int main(void) {
  rf_test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradients_under_full_scope),
      cmocka_unit_test(test_input_list_counts),
      cmocka_unit_test(test_refusals_before_the_node),
      cmocka_unit_test(test_control_edge_messages),
      cmocka_unit_test(test_builder_errors_name_the_node),
      cmocka_unit_test(test_const_refuses_device_tensor),
      cmocka_unit_test(test_run_names_its_bad_argument),
      cmocka_unit_test(test_status_with_an_empty_message),
      cmocka_unit_test(test_status_with_wide_strings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
