/* tests/test_passes.c - the compile stages: pass registry (order, context,
 * errors), placement of resource consumers, topological order and cycles,
 * pruning, the bulk graph edits the stages rely on, device list naming, and
 * the checks that catch passes breaking placement or partitioning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "passes/pass_registry.h"
#include "ringflow/debug.h"
#include "runtime/session_internal.h"
#include "runtime_test_ops.h"

/* ---- resource ops for placement ---- */
static const rf__op_spec res_specs[] = {
    {.name = "TestVar", .outputs = "ref: resource", .flags = RF_OP_STATEFUL},
    {.name = "TestUseVar",
     .inputs = "ref: resource, x: float64",
     .outputs = "y: float64",
     .flags = RF_OP_STATEFUL},
};

static int setup(void **state) {
  static int done;
  rt_register();
  if (!done) {
    done = 1;
    for (int i = 0; i < 2; i++) assert_ok(rf__op_register(&res_specs[i]));
  }
  return 0;
}

/* ---- recording passes, active only while a test wants them ---- */
static int passes_active;
static char pass_log[256];
static const char *fail_in; /* pass name that returns an error */

static void log_pass(const char *name) {
  strcat(pass_log, name);
  strcat(pass_log, " ");
}

static int count_op(const rf_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->num_ids; i++)
    n += g->nodes[i] && strcmp(g->nodes[i]->op->name, op) == 0;
  return n;
}

static bool all_placed(const rf_graph *g) {
  for (int i = 0; i < g->num_ids; i++)
    if (g->nodes[i] && g->nodes[i]->assigned_device < 0) return false;
  return true;
}

static rf_status *check_ctx(rf__pass_ctx *ctx, const char *name) {
  if (!passes_active) return NULL;
  log_pass(name);
  assert_non_null(ctx->graph);
  assert_int_equal(ctx->num_devices, 3);
  assert_string_equal(ctx->devices[2].canonical, "cpu:2");
  assert_int_equal(ctx->default_device, 1);
  if (fail_in && strcmp(fail_in, name) == 0)
    return rf_status_new(RF_INVALID_ARGUMENT, "node 'y' is malformed");
  return NULL;
}

static rf_status *pre_z(rf__pass_ctx *c) {
  rf_status *st = check_ctx(c, "pre_z");
  if (passes_active) assert_false(all_placed(c->graph));
  return st;
}
static rf_status *post_a(rf__pass_ctx *c) {
  if (passes_active) assert_true(all_placed(c->graph));
  return check_ctx(c, "post_a");
}
static rf_status *post_b(rf__pass_ctx *c) { return check_ctx(c, "post_b"); }
static rf_status *post_c(rf__pass_ctx *c) { return check_ctx(c, "post_c"); }
static rf_status *part_p(rf__pass_ctx *c) {
  if (passes_active) assert_true(count_op(c->graph, "_Send") > 0);
  return check_ctx(c, "part_p");
}

/* A POST_PLACEMENT pass that adds an unplaced node, and a POST_PARTITION
 * pass that adds a crossing edge, when asked to. */
static int break_placement, break_partition;

static rf_status *adds_unplaced(rf__pass_ctx *c) {
  if (!break_placement) return NULL;
  rf_node *n = NULL;
  rf__attrs a = {0};
  rf__attr_value v = rf__attr_shape(rf_shape_scalar());
  RF_CHECK(rf__attrs_set(&a, "shape", &v));
  rf_status *st = rf__graph_add_node(c->graph, rf__op_find("TestConst"),
                                     "orphan", "", NULL, 0, &a, &n);
  rf__attrs_clear(&a);
  if (!st)
    RF_CHECK(rf__graph_add_edge(c->graph, n, RF_CONTROL_SLOT,
                                rf_graph_find_node(c->graph, "y"),
                                RF_CONTROL_SLOT));
  return st;
}

static rf_status *adds_crossing(rf__pass_ctx *c) {
  if (!break_partition) return NULL;
  rf_node *a = rf_graph_find_node(c->graph, "c");
  rf_node *b = rf_graph_find_node(c->graph, "y");
  return rf__graph_add_edge(c->graph, a, RF_CONTROL_SLOT, b, RF_CONTROL_SLOT);
}

static void register_passes_once(void) {
  static int done;
  if (done) return;
  done = 1;
  assert_ok(rf__pass_register(RF_PASS_POST_PLACEMENT, 1, "post_b", post_b));
  assert_ok(rf__pass_register(RF_PASS_POST_PLACEMENT, 1, "post_a", post_a));
  assert_ok(rf__pass_register(RF_PASS_POST_PLACEMENT, 0, "post_c", post_c));
  assert_ok(rf__pass_register(RF_PASS_PRE_PLACEMENT, 5, "pre_z", pre_z));
  assert_ok(rf__pass_register(RF_PASS_POST_PARTITION, 0, "part_p", part_p));
  assert_ok(
      rf__pass_register(RF_PASS_POST_PLACEMENT, 9, "unplaced", adds_unplaced));
  assert_ok(
      rf__pass_register(RF_PASS_POST_PARTITION, 9, "crossing", adds_crossing));
}

static void test_pass_registration_errors(void **state) {
  register_passes_once();
  assert_status(rf__pass_register(RF_PASS_PHASE_COUNT, 0, "x", post_a),
                RF_INVALID_ARGUMENT, "bad phase");
  assert_status(rf__pass_register(RF_PASS_POST_PLACEMENT, 0, "", post_a),
                RF_INVALID_ARGUMENT, "needs a name");
  assert_status(rf__pass_register(RF_PASS_POST_PLACEMENT, 0, "x", NULL),
                RF_INVALID_ARGUMENT, "needs a name");
  assert_status(rf__pass_register(RF_PASS_PRE_PLACEMENT, 3, "post_a", post_a),
                RF_ALREADY_EXISTS, "pass 'post_a' is already registered");
  assert_int_equal(rf__passes_count(RF_PASS_PRE_PLACEMENT), 1);
  /* the test's 4 plus the library's fold_constants, single_collectives,
   * fuse_epilogues, fuse_xent_grad, bucket_collectives, group_updates and
   * lower_collectives */
  assert_int_equal(rf__passes_count(RF_PASS_POST_PLACEMENT), 11);
  assert_int_equal(rf__passes_count(RF_PASS_POST_PARTITION), 2);
}

static rf_graph *small_graph(rf_output *y) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", "cpu:0", 1, rf_shape_scalar());
  *y = rt_unary_node(g, "TestAddOne", "y", "cpu:2", c);
  return g;
}

static rf_session *session3(const rf_graph *g) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 3;
  o.num_threads = 1;
  o.default_device = "cpu:1";
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static void test_passes_run_in_order_with_context(void **state) {
  register_passes_once();
  rf_output y;
  rf_graph *g = small_graph(&y);
  rf_session *s = session3(g);
  passes_active = 1;
  pass_log[0] = '\0';
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out));
  assert_string_equal(pass_log, "pre_z post_c post_a post_b part_p ");
  assert_true(rf_tensor_get(out, 0) == 2);
  rf_tensor_release(out);
  /* A second run uses the cached plan: no pass runs. */
  pass_log[0] = '\0';
  assert_ok(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out));
  assert_string_equal(pass_log, "");
  rf_tensor_release(out);
  /* A failing pass fails the compile, prefixed with its name. */
  fail_in = "post_a";
  rf_output c = {rf_graph_find_node(g, "c"), 0};
  assert_status(rf_session_run(s, NULL, 0, &c, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "pass 'post_a': node 'y' is malformed");
  assert_string_equal(pass_log, "pre_z post_c post_a ");
  fail_in = NULL;
  passes_active = 0;
  assert_ok(rf_session_run(s, NULL, 0, &c, 1, NULL, 0, &out));
  rf_tensor_release(out);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_broken_passes_are_caught(void **state) {
  register_passes_once();
  rf_output y;
  rf_graph *g = small_graph(&y);
  rf_session *s = session3(g);
  rf_tensor *out = NULL;
  break_placement = 1;
  assert_status(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out), RF_INTERNAL,
                "node 'orphan' (TestConst) has no device after placement");
  break_placement = 0;
  break_partition = 1;
  assert_status(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out), RF_INTERNAL,
                "edge 'c' (on cpu:0) -> 'y' (on cpu:2) crosses devices after "
                "partitioning");
  break_partition = 0;
  assert_ok(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out));
  rf_tensor_release(out);
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- placement on its own ---- */

static rf_node *add(rf_graph *g, const char *op, const char *name,
                    const char *dev, const rf_output *in, int n) {
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  if (dev) rf_node_builder_device(b, dev);
  return rt_finish(b);
}

/* The device rf_graph_lower gave node `name` of g (4 CPU devices). */
static void assert_lowered_on(const rf_graph *low, const char *name,
                              const char *dev) {
  rf_node *n = rf_graph_find_node(low, name);
  if (!n) fail_msg("no node '%s' in the lowered graph", name);
  if (strcmp(rf_node_device(n), dev))
    fail_msg("node '%s' on %s, expected %s", name, rf_node_device(n), dev);
}

/* A node without a device takes its first input that has one (requested,
 * or derived from one): 2 * x and x * 2 both run where x is, and a Const
 * with no device joins its consumers when they all run on one device. */
static void test_floating_inputs_do_not_place(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  const rf_shape s3 = rf_shape_of(1, (int64_t)3);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, s3);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:3"));
  rf_output z = rf_placeholder(g, "z", RF_FLOAT32, s3);
  rf_graph_pop_device(g);
  rf_output two = rf_const_scalar(g, "two", RF_FLOAT32, 2.0);
  rf_output three = rf_const_scalar(g, "three", RF_FLOAT32, 3.0);
  rf_output shared = rf_const_scalar(g, "shared", RF_FLOAT32, 4.0);
  rf_output free_x = rf_placeholder(g, "free_x", RF_FLOAT32, s3);
  rf_mul(g, "left", two, x);    /* the Const first */
  rf_mul(g, "right", x, three); /* x first */
  rf_output l2 = rf_add(g, "l2", rf_neg(g, "neg_two", two), x);
  rf_mul(g, "s1", shared, x); /* shared: read on cpu:1 and cpu:3 */
  rf_mul(g, "s3", shared, z);
  rf_add(g, "mixed", free_x, z); /* a free placeholder first: z's device */
  rf_add(g, "all_free", free_x, free_x);
  rf_add(g, "after", l2, l2);
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 4;
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, &o, &low));
  assert_lowered_on(low, "left", "cpu:1");
  assert_lowered_on(low, "two", "cpu:0"); /* also read by neg_two */
  assert_lowered_on(low, "right", "cpu:1");
  assert_lowered_on(low, "three", "cpu:1");   /* its one consumer's */
  assert_lowered_on(low, "neg_two", "cpu:0"); /* only a floating input */
  assert_lowered_on(low, "l2", "cpu:1");      /* x, its input 1 */
  assert_lowered_on(low, "after", "cpu:1");
  assert_lowered_on(low, "shared", "cpu:0"); /* consumers disagree */
  assert_lowered_on(low, "s1", "cpu:1");
  assert_lowered_on(low, "s3", "cpu:3");
  assert_lowered_on(low, "mixed", "cpu:3");
  assert_lowered_on(low, "free_x", "cpu:0"); /* a Placeholder stays */
  assert_lowered_on(low, "all_free", "cpu:0");
  rf_graph_free(low);
  /* And the values: the Mul of a Const on another device is exact. */
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  rf_tensor *xv = NULL, *out[2] = {NULL, NULL};
  assert_ok(rf_tensor_new(RF_FLOAT32, &s3, NULL, &xv));
  for (int i = 0; i < 3; i++) rf_tensor_set(xv, i, 1.5 * i - 1);
  rf_feed feed = {x, xv};
  rf_output fetch[2] = {{rf_graph_find_node(g, "left"), 0},
                        {rf_graph_find_node(g, "right"), 0}};
  assert_ok(rf_session_run(s, &feed, 1, fetch, 2, NULL, 0, out));
  for (int i = 0; i < 3; i++) {
    assert_true(rf_tensor_get(out[0], i) == 2 * (1.5 * i - 1));
    assert_true(rf_tensor_get(out[1], i) == 3 * (1.5 * i - 1));
  }
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_resource_consumers_follow_their_variable(void **state) {
  rf_graph *g = rf_graph_new();
  rf_node *var = add(g, "TestVar", "var", "cpu:2", NULL, 0);
  rf_output x = rt_const_node(g, "x", "cpu:1", 1, rf_shape_scalar());
  rf_output in[2] = {{var, 0}, x};
  /* Input 1 lives on cpu:1, but the state lives on cpu:2. */
  rf_node *use = add(g, "TestUseVar", "use", NULL, in, 2);
  rf_node *pinned = add(g, "TestUseVar", "pinned", "cpu:3", in, 2);
  rf_output after_in = {use, 0};
  rf_node *after = add(g, "TestAddOne", "after", NULL, &after_in, 1);
  rf_node *free_node = add(g, "TestConst", "free", NULL, NULL, 0);
  rf_session *s = rt_session(g, 4, 1);
  rf__pass_ctx ctx = {.graph = s->graph,
                      .devices = s->devices,
                      .num_devices = s->num_devices,
                      .num_tasks = 1};
  assert_ok(rf__place(&ctx));
  const rf_graph *sg = s->graph;
  assert_int_equal(sg->nodes[var->id]->assigned_device, 2);
  assert_int_equal(sg->nodes[use->id]->assigned_device, 2);
  assert_int_equal(sg->nodes[pinned->id]->assigned_device, 3);
  assert_int_equal(sg->nodes[after->id]->assigned_device, 2);
  assert_int_equal(sg->nodes[free_node->id]->assigned_device, 0);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_cycles_are_reported(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 1, rf_shape_scalar());
  rf_output a = rt_unary_node(g, "TestAddOne", "a", NULL, c);
  rf_output b = rt_unary_node(g, "TestAddOne", "b", NULL, a);
  /* The public API refuses cycles; the internal one lets a pass make one. */
  assert_ok(
      rf__graph_add_edge(g, b.node, RF_CONTROL_SLOT, a.node, RF_CONTROL_SLOT));
  rf_node **order = NULL;
  int n = 0;
  assert_status(rf__topological_order(g, &order, &n), RF_INVALID_ARGUMENT,
                "the graph has a cycle through node 'a' (TestAddOne)");
  rf_graph_free(g);
}

static void test_prune_keeps_data_and_control_ancestors(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 1, rf_shape_scalar());
  rf_output a = rt_unary_node(g, "TestAddOne", "a", NULL, c);
  rf_output ctl = rt_const_node(g, "ctl", NULL, 1, rf_shape_scalar());
  rf_output ctl_src = rt_unary_node(g, "TestAddOne", "ctl_src", NULL, ctl);
  assert_ok(rf_graph_add_control_edge(g, ctl_src.node, a.node));
  rf_output dead = rt_unary_node(g, "TestAddOne", "dead", NULL, a);
  rt_unary_node(g, "TestAddOne", "dead2", NULL, dead);
  rf_output other = rt_const_node(g, "other", NULL, 1, rf_shape_scalar());
  (void)other;
  char keep[16] = {0};
  keep[a.node->id] = 1;
  assert_ok(rf__prune(g, keep));
  assert_int_equal(rf_graph_num_nodes(g), 4); /* c, a, ctl, ctl_src */
  assert_non_null(rf_graph_find_node(g, "ctl_src"));
  assert_null(rf_graph_find_node(g, "dead"));
  assert_null(rf_graph_find_node(g, "other"));
  assert_int_equal(a.node->num_out_edges, 0);
  rf_graph_free(g);
}

/* ---- bulk edits on a large fan-out (quadratic if done one at a time) ---- */

static void check_edges(const rf_graph *g) {
  for (int i = 0; i < g->num_ids; i++) {
    const rf_node *v = g->nodes[i];
    if (!v) continue;
    for (int k = 0; k < v->num_out_edges; k++)
      assert_ptr_equal(v->out_edges[k]->src, v);
    for (int k = 0; k < v->num_in_edges; k++) {
      const rf__edge *e = v->in_edges[k];
      assert_ptr_equal(e->dst, v);
      assert_ptr_equal(g->nodes[e->src->id], e->src);
      if (e->dst_in >= 0) assert_ptr_equal(v->data_in[e->dst_in], e);
    }
  }
}

static void test_bulk_edits_on_a_wide_fan_out(void **state) {
  enum { W = 50000 };
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 1, rf_shape_scalar());
  rf_output c2 = rt_const_node(g, "c2", NULL, 2, rf_shape_scalar());
  static rf__edge *edges[W];
  static rf_node *srcs[W];
  static int outs[W];
  for (int i = 0; i < W; i++) {
    rf_output y = rt_unary_node(g, "TestAddOne", NULL, NULL, c);
    edges[i] = y.node->data_in[0];
  }
  assert_int_equal(c.node->num_out_edges, W);
  /* Move every other consumer to c2; first under a failed allocation. */
  int n = 0;
  for (int i = 0; i < W; i += 2, n++) {
    edges[n] = edges[i];
    srcs[n] = c2.node;
    outs[n] = 0;
  }
  rf_debug_fail_allocation_after(1);
  rf_status *st = rf__graph_redirect_edges(g, c.node, edges, srcs, outs, n);
  rf_debug_fail_allocation_after(0);
  assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
  assert_int_equal(c.node->num_out_edges, W);
  assert_int_equal(c2.node->num_out_edges, 0);
  assert_ok(rf__graph_redirect_edges(g, c.node, edges, srcs, outs, n));
  assert_int_equal(c.node->num_out_edges, W - n);
  assert_int_equal(c2.node->num_out_edges, n);
  check_edges(g);
  /* Remove all consumers of c2 in one go. */
  char *remove = calloc((size_t)g->num_ids, 1);
  for (int k = 0; k < n; k++) remove[edges[k]->dst->id] = 1;
  rf__graph_remove_nodes(g, remove);
  free(remove);
  assert_int_equal(rf_graph_num_nodes(g), 2 + W - n);
  assert_int_equal(c2.node->num_out_edges, 0);
  check_edges(g);
  rf_graph_free(g);
}

static void test_device_list_format(void **state) {
  rf__device d[6];
  rf__device_name names[6] = {{-1, RF_DEVICE_CPU, 0}, {-1, RF_DEVICE_CPU, 1},
                              {-1, RF_DEVICE_CPU, 2}, {-1, RF_DEVICE_GPU, 0},
                              {-1, RF_DEVICE_GPU, 1}, {-1, RF_DEVICE_GPU, 3}};
  for (int i = 0; i < 6; i++)
    rf__device_init(&d[i], i, &names[i], rf_default_allocator(), NULL);
  char buf[128];
  rf__device_list_format(d, 6, buf, sizeof buf);
  assert_string_equal(buf, "cpu:0..cpu:2, gpu:0..gpu:1, gpu:3");
  rf__device_list_format(d, 1, buf, sizeof buf);
  assert_string_equal(buf, "cpu:0");
  rf__device_list_format(d, 0, buf, sizeof buf);
  assert_string_equal(buf, "no devices");
  rf__device_list_format(d, 6, buf, 8); /* truncates, stays terminated */
  assert_int_equal(strlen(buf), 7);
  rf__device_name gpu1 = {-1, RF_DEVICE_GPU, 1}, gpu2 = {0, RF_DEVICE_GPU, 2};
  assert_int_equal(rf__device_find(d, 6, &gpu1), 4);
  assert_int_equal(rf__device_find(d, 6, &gpu2), -1);
  for (int i = 0; i < 6; i++) rf__device_destroy(&d[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_pass_registration_errors, setup),
      cmocka_unit_test_setup(test_passes_run_in_order_with_context, setup),
      cmocka_unit_test_setup(test_broken_passes_are_caught, setup),
      cmocka_unit_test_setup(test_resource_consumers_follow_their_variable,
                             setup),
      cmocka_unit_test_setup(test_floating_inputs_do_not_place, setup),
      cmocka_unit_test_setup(test_cycles_are_reported, setup),
      cmocka_unit_test_setup(test_prune_keeps_data_and_control_ancestors,
                             setup),
      cmocka_unit_test_setup(test_bulk_edits_on_a_wide_fan_out, setup),
      cmocka_unit_test_setup(test_device_list_format, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
