/* tests/test_gradients.c - the structure rf_gradients builds, with test-only
 * ops registered here (so no op family's gradient is involved): summing of
 * contributions, un-summed delivery, ops without gradients, device scopes,
 * argument errors, grad fn errors and allocation failures. Values are checked
 * in test_gradient_values.c. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "ringflow/debug.h"
/* internal */
#include "graph/graph.h"
#include "ops/op_registry.h"
#include "runtime/families.h"

/* ---- test ops ---- */

static rf_status *same_shape(rf__shape_ctx *c) {
  for (int i = 0; i < c->num_outputs; i++)
    c->output_shapes[i] = c->input_shapes[0];
  return NULL;
}

/* One node of `op` on input x; status for grad fns to return. */
static rf_status *make1(rf_graph *g, const char *op, const char *name,
                        rf_output x, rf_output *out) {
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  rf_node_builder_input(b, x);
  rf_node *n = NULL;
  rf_status *st = rf_node_builder_finish(b, &n);
  if (!st) *out = (rf_output){n, 0};
  return st;
}

static rf_output op1(rf_graph *g, const char *op, const char *name,
                     rf_output x) {
  rf_output o = {NULL, 0};
  assert_ok(make1(g, op, name, x, &o));
  return o;
}

static rf_output op2(rf_graph *g, const char *op, const char *name, rf_output a,
                     rf_output b) {
  rf_node_builder *nb = rf_node_builder_new(g, op, name);
  rf_node_builder_input(nb, a);
  rf_node_builder_input(nb, b);
  rf_node *n = NULL;
  assert_ok(rf_node_builder_finish(nb, &n));
  return (rf_output){n, 0};
}

/* TestUnary / TestBinary: every input's gradient is TestGrad(dy). */
static rf_status *pass_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  for (int k = 0; k < c->op->num_inputs; k++)
    RF_CHECK(make1(c->g, "TestGrad", NULL, c->dy[0], &c->dx[k]));
  return NULL;
}

/* What the last TestUnsummed / TestTwoOut gradient call saw. */
static struct {
  int calls;
  bool dy_null;
  int num_parts;
  rf_output parts[8];
  bool dy_valid[2];
} seen;

static rf_status *unsummed_grad(rf__grad_ctx *c) {
  seen.calls++;
  seen.dy_null = c->dy == NULL;
  seen.num_parts = c->num_dy_parts[0];
  for (int i = 0; i < seen.num_parts && i < 8; i++)
    seen.parts[i] = c->dy_parts[0][i];
  rf_output sum = c->dy_parts[0][0];
  if (c->num_dy_parts[0] > 1)
    sum = rf_add_n(c->g, NULL, c->dy_parts[0], c->num_dy_parts[0]);
  return make1(c->g, "TestGrad", NULL, sum, &c->dx[0]);
}

static rf_status *two_out_grad(rf__grad_ctx *c) {
  seen.calls++;
  seen.dy_valid[0] = c->dy[0].node != NULL;
  seen.dy_valid[1] = c->dy[1].node != NULL;
  return make1(c->g, "TestGrad", NULL, c->dy[c->dy[0].node ? 0 : 1], &c->dx[0]);
}

static rf_status *failing_grad(rf__grad_ctx *c) {
  return rf_status_new(RF_UNIMPLEMENTED, "test failure in %s", c->op->op->name);
}

static rf_status *sticky_grad(rf__grad_ctx *c) {
  rf__graph_record(c->g, rf_status_new(RF_INVALID_ARGUMENT, "sticky test"));
  return NULL;
}

/* Gradients that do not match their input. */
static rf_status *bad_shape_grad(rf__grad_ctx *c) {
  c->dx[0] = rf_placeholder(c->g, NULL, RF_FLOAT32, rf_shape_of(1, 7));
  return NULL;
}

static rf_status *bad_dtype_grad(rf__grad_ctx *c) {
  c->dx[0] = rf_placeholder(c->g, NULL, RF_FLOAT64, rf_shape_of(2, 2, 3));
  return NULL;
}

#define UNARY(op_name, fn, fl)                                                \
  {                                                                           \
    .name = op_name, .inputs = "x: T", .outputs = "y: T", .attrs = "T: type", \
    .shape = same_shape, .grad = fn, .flags = fl                              \
  }

static const rf__op_spec test_ops[] = {
    UNARY("TestUnary", pass_grad, 0),
    UNARY("TestGrad", NULL, 0),
    UNARY("TestUnsummed", unsummed_grad, RF_OP_GRAD_UNSUMMED),
    UNARY("TestNoGrad", NULL, RF_OP_NO_GRADIENT),
    UNARY("TestMissing", NULL, 0),
    UNARY("TestFail", failing_grad, 0),
    UNARY("TestSticky", sticky_grad, 0),
    UNARY("TestBadShape", bad_shape_grad, 0),
    UNARY("TestBadDtype", bad_dtype_grad, 0),
    {.name = "TestBinary",
     .inputs = "a: T, b: T",
     .outputs = "y: T",
     .attrs = "T: type",
     .shape = same_shape,
     .grad = pass_grad},
    {.name = "TestTwoOut",
     .inputs = "x: T",
     .outputs = "a: T, b: T",
     .attrs = "T: type",
     .shape = same_shape,
     .grad = two_out_grad},
};

static int setup_ops(void **state) {
  (void)state;
  rf_status *st = rf__registry_init();
  for (size_t i = 0; !st && i < sizeof test_ops / sizeof test_ops[0]; i++)
    st = rf__op_register(&test_ops[i]);
  assert_ok(st);
  return 0;
}

/* ---- helpers ---- */

static const rf_output INVALID = {NULL, 0};

static rf_output input_of(rf_output o, int k) {
  return rf_node_input(o.node, k);
}

static void assert_op(rf_output o, const char *op) {
  assert_non_null(o.node);
  assert_string_equal(rf_node_op(o.node), op);
}

static void assert_same(rf_output a, rf_output b) {
  assert_ptr_equal(a.node, b.node);
  assert_int_equal(a.index, b.index);
}

static rf_output x_placeholder(rf_graph *g, const char *name) {
  return rf_placeholder(g, name, RF_FLOAT32, rf_shape_of(2, 2, 3));
}

static rf_graph *new_graph(void) {
  rf_graph *g = rf_graph_new();
  assert_non_null(g);
  return g;
}

/* ---- tests ---- */

/* dx = TestGrad(OnesLike(y)) for y = TestUnary(x). */
static void test_single_path(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output y = op1(g, "TestUnary", "u", x);
  rf_output dx = INVALID;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_op(dx, "TestGrad");
  rf_output ones = input_of(dx, 0);
  assert_op(ones, "OnesLike");
  assert_same(input_of(ones, 0), y);
  assert_int_equal(rf_output_dtype(dx), RF_FLOAT32);
  assert_graph_ok(g);
  rf_graph_free(g);
}

/* Two paths from x meet in x's gradient: AddN of both contributions; a tensor
 * consumed twice by one node gets its two contributions summed too. */
static void test_sum_two_contributions(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output a = op1(g, "TestUnary", "a", x);
  rf_output b = op1(g, "TestUnary", "b", x);
  rf_output y = op2(g, "TestBinary", "y", a, b);
  rf_output dx = INVALID;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_op(dx, "AddN");
  assert_int_equal(rf_node_num_inputs(dx.node), 2);
  for (int k = 0; k < 2; k++) {
    rf_output part = input_of(dx, k);
    assert_op(part, "TestGrad");
    assert_op(input_of(part, 0), "TestGrad"); /* of a or b */
    assert_op(input_of(input_of(part, 0), 0), "OnesLike");
  }

  rf_output m = op1(g, "TestUnary", "m", x);
  rf_output z = op2(g, "TestBinary", "z", m, m);
  assert_ok(rf_gradients(g, &z, 1, &x, 1, NULL, &dx));
  assert_op(dx, "TestGrad");
  rf_output sum = input_of(dx, 0);
  assert_op(sum, "AddN");
  assert_int_equal(rf_node_num_inputs(sum.node), 2);
  assert_op(input_of(sum, 0), "TestGrad");
  assert_op(input_of(sum, 1), "TestGrad");
  rf_graph_free(g);
}

/* A flagged op receives its contributions un-summed (dy NULL); an x that is
 * such an op's output still gets the sum. */
static void test_unsummed_delivery(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output br = op1(g, "TestUnsummed", "br", x);
  rf_output c1 = op1(g, "TestUnary", "c1", br);
  rf_output c2 = op1(g, "TestUnary", "c2", br);
  rf_output c3 = op1(g, "TestUnary", "c3", br);
  rf_output y =
      op2(g, "TestBinary", "y", c1, op2(g, "TestBinary", "y2", c2, c3));
  memset(&seen, 0, sizeof seen);
  rf_output dx[2] = {INVALID, INVALID};
  rf_output xs[2] = {x, br};
  assert_ok(rf_gradients(g, &y, 1, xs, 2, NULL, dx));
  assert_int_equal(seen.calls, 1);
  assert_true(seen.dy_null);
  assert_int_equal(seen.num_parts, 3);
  for (int i = 0; i < 3; i++) {
    assert_op(seen.parts[i], "TestGrad");
    rf_output src = input_of(seen.parts[i], 0);
    assert_true(strcmp(rf_node_op(src.node), "AddN") != 0);
  }
  /* dx[0] = TestGrad(AddN(parts)) from unsummed_grad. */
  assert_op(dx[0], "TestGrad");
  rf_output sum = input_of(dx[0], 0);
  assert_op(sum, "AddN");
  for (int i = 0; i < 3; i++) assert_same(input_of(sum, i), seen.parts[i]);
  /* dx[1]: the builder sums for the caller. */
  assert_op(dx[1], "AddN");
  assert_int_equal(rf_node_num_inputs(dx[1].node), 3);
  for (int i = 0; i < 3; i++) assert_same(input_of(dx[1], i), seen.parts[i]);

  /* One consumer: one part. */
  rf_output br2 = op1(g, "TestUnsummed", "br2", x);
  rf_output y3 = op1(g, "TestUnary", "y3", br2);
  memset(&seen, 0, sizeof seen);
  assert_ok(rf_gradients(g, &y3, 1, &x, 1, NULL, dx));
  assert_int_equal(seen.calls, 1);
  assert_int_equal(seen.num_parts, 1);
  assert_op(seen.parts[0], "TestGrad");
  assert_same(input_of(dx[0], 0), seen.parts[0]);
  rf_graph_free(g);
}

/* A NO_GRADIENT op stops propagation without error, even when it is the only
 * path. */
static void test_no_gradient_stops(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output stop = op1(g, "TestNoGrad", "stop", x);
  rf_output u = op1(g, "TestUnary", "u", x);
  rf_output y = op2(g, "TestBinary", "y", stop, u);
  rf_output dx = INVALID;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_op(dx, "TestGrad"); /* single contribution, through u only */
  assert_op(input_of(dx, 0), "TestGrad");

  rf_output only = op1(g, "TestUnary", "only", stop);
  dx = x;
  assert_ok(rf_gradients(g, &only, 1, &x, 1, NULL, &dx));
  assert_null(dx.node);
  assert_graph_ok(g);
  rf_graph_free(g);
}

/* A differentiable-looking op without a grad fn on the path is an error
 * naming op and node; the same op off the path, or as an x, is fine. */
static void test_missing_grad_fn(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output m = op1(g, "TestMissing", "miss", x);
  rf_output y = op1(g, "TestUnary", "y", m);
  rf_output dx = {x.node, 7}; /* sentinel: must stay */
  assert_status(rf_gradients(g, &y, 1, &x, 1, NULL, &dx), RF_NOT_FOUND,
                "No gradient defined for op 'TestMissing' (node 'miss')");
  assert_ptr_equal(dx.node, x.node);
  assert_int_equal(dx.index, 7);
  assert_graph_ok(g);

  /* As the x itself: its gradient function is never needed. */
  assert_ok(rf_gradients(g, &y, 1, &m, 1, NULL, &dx));
  assert_op(dx, "TestGrad");

  /* Off the path: a consumer of x that does not reach y. */
  rf_output side = op1(g, "TestMissing", "side", x);
  rf_output y2 = op1(g, "TestUnary", "y2", x);
  (void)side;
  assert_ok(rf_gradients(g, &y2, 1, &x, 1, NULL, &dx));
  assert_op(dx, "TestGrad");
  rf_graph_free(g);
}

/* Gradient nodes request the device of their forward node, whatever scope the
 * caller has pushed; the scope is restored afterwards. */
static void test_device_scope(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output x = x_placeholder(g, "x");
  rf_output a = op1(g, "TestUnary", "a", x);
  rf_output b = op1(g, "TestUnary", "b", x);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:2"));
  rf_output s = op2(g, "TestBinary", "s", a, b);
  rf_output y = op2(g, "TestBinary", "y", s, s);
  rf_graph_pop_device(g);
  rf_output c = op1(g, "TestUnary", "c", x); /* no device */
  rf_output z = op2(g, "TestBinary", "z", y, c);

  assert_ok(rf_graph_push_device(g, "cpu:3"));
  int depth = g->device_depth;
  rf_output dx = INVALID;
  assert_ok(rf_gradients(g, &z, 1, &x, 1, NULL, &dx));
  assert_int_equal(g->device_depth, depth);
  assert_string_equal(rf__graph_scope_device(g), "cpu:3");
  rf_graph_pop_device(g);

  /* dx: AddN on x's device of [grad via c, grad via a, grad via b]. */
  assert_op(dx, "AddN");
  assert_string_equal(rf_node_device(dx.node), "cpu:1");
  int found_c = 0, found_ab = 0;
  for (int k = 0; k < rf_node_num_inputs(dx.node); k++) {
    rf_output part = input_of(dx, k);
    assert_op(part, "TestGrad");
    const char *dev = rf_node_device(part.node);
    if (!strcmp(dev, "")) found_c++;
    if (!strcmp(dev, "cpu:1")) found_ab++;
  }
  assert_int_equal(found_c, 1);
  assert_int_equal(found_ab, 2);
  /* Walk to y's gradient: s's two contributions from y are summed on cpu:2,
   * and z's seed is made where z is (no device). */
  rf_output via_a = INVALID;
  for (int k = 0; k < rf_node_num_inputs(dx.node); k++)
    if (!strcmp(rf_node_device(input_of(dx, k).node), "cpu:1"))
      via_a = input_of(dx, k);
  rf_output da = input_of(via_a, 0); /* TestGrad of s, on cpu:2 */
  assert_op(da, "TestGrad");
  assert_string_equal(rf_node_device(da.node), "cpu:2");
  rf_output ds = input_of(da, 0);
  assert_op(ds, "AddN");
  assert_string_equal(rf_node_device(ds.node), "cpu:2");
  rf_output dy = input_of(input_of(ds, 0), 0);
  assert_op(dy, "TestGrad"); /* z's gradient for y: z has no device */
  assert_string_equal(rf_node_device(dy.node), "");
  assert_op(input_of(dy, 0), "OnesLike");
  assert_string_equal(rf_node_device(input_of(dy, 0).node), "");

  /* A y with a device gets its OnesLike there. */
  rf_output dx2 = INVALID;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx2));
  rf_output seed = dx2; /* AddN <- a <- s <- AddN <- y <- OnesLike */
  for (int i = 0; i < 5; i++) seed = input_of(seed, 0);
  assert_op(seed, "OnesLike");
  assert_string_equal(rf_node_device(seed.node), "cpu:2");
  rf_graph_free(g);
}

/* An x no y depends on gets the invalid output; others are unaffected. */
static void test_x_not_reaching_y(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output other = x_placeholder(g, "other");
  rf_output after = op1(g, "TestUnary", "after", x); /* downstream of y */
  rf_output y = op1(g, "TestUnary", "y", x);
  rf_output after_y = op1(g, "TestUnary", "after_y", y);
  rf_output xs[4] = {other, x, after, after_y};
  rf_output dx[4] = {x, x, x, x};
  assert_ok(rf_gradients(g, &y, 1, xs, 4, NULL, dx));
  assert_null(dx[0].node);
  assert_op(dx[1], "TestGrad");
  assert_null(dx[2].node);
  assert_null(dx[3].node);
  rf_graph_free(g);
}

/* grad_ys replaces the OnesLike seed, and weights each y. */
static void test_grad_ys(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output y1 = op1(g, "TestUnary", "y1", x);
  rf_output y2 = op1(g, "TestUnary", "y2", x);
  rf_output gy[2] = {x_placeholder(g, "g1"), x_placeholder(g, "g2")};
  rf_output ys[2] = {y1, y2};
  int before = rf_graph_num_nodes(g);
  rf_output dx = INVALID;
  assert_ok(rf_gradients(g, ys, 2, &x, 1, gy, &dx));
  assert_int_equal(rf_graph_num_nodes(g), before + 3); /* 2 TestGrad + AddN */
  assert_op(dx, "AddN");
  assert_same(input_of(input_of(dx, 0), 0), gy[0]);
  assert_same(input_of(input_of(dx, 1), 0), gy[1]);

  /* Without grad_ys, two OnesLike seeds. */
  assert_ok(rf_gradients(g, ys, 2, &x, 1, NULL, &dx));
  assert_op(input_of(input_of(dx, 0), 0), "OnesLike");
  assert_op(input_of(input_of(dx, 1), 0), "OnesLike");
  rf_graph_free(g);
}

/* A repeated x gets the same output; an x that is also a y gets the seed;
 * the same y twice counts twice. */
static void test_repeats_and_identity(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output a = op1(g, "TestUnary", "a", x);
  rf_output y = op2(g, "TestBinary", "y", a, x);
  rf_output xs[3] = {x, y, x};
  rf_output dx[3];
  assert_ok(rf_gradients(g, &y, 1, xs, 3, NULL, dx));
  assert_op(dx[0], "AddN");
  assert_same(dx[0], dx[2]);
  assert_op(dx[1], "OnesLike");
  assert_same(input_of(dx[1], 0), y);

  rf_output gy = x_placeholder(g, "gy");
  assert_ok(rf_gradients(g, &y, 1, &y, 1, &gy, dx));
  assert_same(dx[0], gy);

  rf_output ys[2] = {a, a};
  assert_ok(rf_gradients(g, ys, 2, &x, 1, NULL, dx));
  assert_op(dx[0], "TestGrad");
  rf_output sum = input_of(dx[0], 0);
  assert_op(sum, "AddN");
  assert_op(input_of(sum, 0), "OnesLike");
  assert_op(input_of(sum, 1), "OnesLike");
  rf_graph_free(g);
}

/* Only the output that receives gradient has a valid dy. */
static void test_multi_output_partial(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output two = op1(g, "TestTwoOut", "two", x);
  rf_output second = {two.node, 1};
  rf_output y = op1(g, "TestUnary", "y", second);
  memset(&seen, 0, sizeof seen);
  rf_output dx = INVALID;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_int_equal(seen.calls, 1);
  assert_false(seen.dy_valid[0]);
  assert_true(seen.dy_valid[1]);
  assert_op(dx, "TestGrad");
  /* Asking for the unused output of the x node: nothing reached it. */
  rf_output xs[2] = {two, second};
  rf_output dxs[2];
  assert_ok(rf_gradients(g, &y, 1, xs, 2, NULL, dxs));
  assert_null(dxs[0].node);
  assert_op(dxs[1], "TestGrad");
  rf_graph_free(g);
}

static void test_argument_errors(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_graph *h = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output y = op1(g, "TestUnary", "y", x);
  rf_output hx = x_placeholder(h, "hx");
  rf_output dx = {x.node, 5};
  const rf_code E = RF_INVALID_ARGUMENT;
  assert_status(rf_gradients(NULL, &y, 1, &x, 1, NULL, &dx), E, "graph");
  assert_status(rf_gradients(g, NULL, 1, &x, 1, NULL, &dx), E, "y");
  assert_status(rf_gradients(g, &y, 0, &x, 1, NULL, &dx), E, "ny=0");
  assert_status(rf_gradients(g, &y, -1, &x, 1, NULL, &dx), E, "ny=-1");
  assert_status(rf_gradients(g, &y, 1, NULL, 1, NULL, &dx), E, "x");
  assert_status(rf_gradients(g, &y, 1, &x, 0, NULL, &dx), E, "nx=0");
  assert_status(rf_gradients(g, &y, 1, &x, 1, NULL, NULL), E, "dxs");
  assert_status(rf_gradients(g, &INVALID, 1, &x, 1, NULL, &dx), E,
                "ys[0] is the invalid output");
  assert_status(rf_gradients(g, &y, 1, &hx, 1, NULL, &dx), E,
                "xs[0] (node 'hx') is not in this graph");
  assert_status(rf_gradients(g, &hx, 1, &x, 1, NULL, &dx), E,
                "ys[0] (node 'hx') is not in this graph");
  rf_output bad_index = {x.node, 1};
  assert_status(rf_gradients(g, &y, 1, &bad_index, 1, NULL, &dx), E,
                "output 1 of node 'x'");
  rf_output ys2[2] = {y, y};
  rf_output gys[2] = {x, INVALID};
  assert_status(rf_gradients(g, ys2, 2, &x, 1, gys, &dx), E, "grad_ys[1]");
  gys[1] = hx;
  assert_status(rf_gradients(g, ys2, 2, &x, 1, gys, &dx), E,
                "grad_ys[1] (node 'hx') is not in this graph");
  rf_output g64 = rf_placeholder(g, "g64", RF_FLOAT64, rf_shape_of(2, 2, 3));
  assert_status(rf_gradients(g, &y, 1, &x, 1, &g64, &dx), E,
                "grad_ys[0] has dtype float64 but ys[0] (node 'y') has dtype "
                "float32");
  rf_output g43 = rf_placeholder(g, "g43", RF_FLOAT32, rf_shape_of(2, 4, 3));
  assert_status(rf_gradients(g, &y, 1, &x, 1, &g43, &dx), E,
                "grad_ys[0] has shape (4, 3) but ys[0] (node 'y') has shape "
                "(2, 3)");
  /* Partly unknown shapes that may agree are accepted. */
  rf_output gq =
      rf_placeholder(g, "gq", RF_FLOAT32, rf_shape_of(2, RF_UNKNOWN_DIM, 3));
  rf_output gu = rf_placeholder(g, "gu", RF_FLOAT32, rf_shape_unknown());
  rf_output ok;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, &gq, &ok));
  assert_ok(rf_gradients(g, &y, 1, &x, 1, &gu, &ok));
  assert_ptr_equal(dx.node, x.node);
  assert_int_equal(dx.index, 5);

  /* A graph already holding an error: a copy of it. */
  rf__graph_record(g, rf_status_new(RF_FAILED_PRECONDITION, "earlier fault"));
  int before = rf_graph_num_nodes(g);
  assert_status(rf_gradients(g, &y, 1, &x, 1, NULL, &dx),
                RF_FAILED_PRECONDITION, "earlier fault");
  assert_int_equal(rf_graph_num_nodes(g), before);
  assert_status(rf_graph_status(g), RF_FAILED_PRECONDITION, "earlier fault");
  rf_graph_free(g);
  rf_graph_free(h);
}

/* Errors from a grad fn, returned or recorded in the graph, and gradients that
 * do not fit their input, come back naming the node. */
static void test_grad_fn_errors(void **state) {
  (void)state;
  static const struct {
    const char *op;
    rf_code code;
    const char *msg;
  } cases[] = {
      {"TestFail", RF_UNIMPLEMENTED, "test failure in TestFail"},
      {"TestSticky", RF_INVALID_ARGUMENT, "sticky test"},
      {"TestBadShape", RF_INTERNAL,
       "is float32 (7), but the input is "
       "float32 (2, 3)"},
      {"TestBadDtype", RF_INTERNAL,
       "is float64 (2, 3), but the input is "
       "float32 (2, 3)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rf_graph *g = new_graph();
    rf_output x = x_placeholder(g, "x");
    rf_output f = op1(g, cases[i].op, "culprit", x);
    rf_output y = op1(g, "TestUnary", "y", f);
    rf_output dx = {x.node, 3};
    rf_status *st = rf_gradients(g, &y, 1, &x, 1, NULL, &dx);
    assert_int_equal(rf_status_code(st), cases[i].code);
    assert_non_null(strstr(rf_status_message(st), "'culprit'"));
    assert_non_null(strstr(rf_status_message(st), cases[i].op));
    assert_status(st, cases[i].code, cases[i].msg);
    assert_int_equal(dx.index, 3);
    /* the error is the returned status's alone: g stays usable (TestSticky
     * records it in g; sessions could not be made from g after it) */
    assert_graph_ok(g);
    rf_session *sess;
    assert_ok(rf_session_new(g, NULL, &sess));
    rf_session_free(sess);
    rf_graph_free(g);
  }
}

/* bool tensors carry no gradient: rf_gradients of a bool y, or through
 * bool tensors (Tile, Select, Concat of one tensor twice, Gather), leaves
 * dx invalid instead of failing on _TileGrad, _SumToShapeOf or AddN of
 * bool; and a failed rf_gradients leaves no error in g, so a session can
 * still be made from it. */
static void test_bool_carries_no_gradient(void **state) {
  (void)state;
  for (int k = 0; k < 5; k++) {
    rf_graph *g = rf_graph_new();
    rf_output b = rf_placeholder(g, "b", RF_BOOL, rf_shape_of(1, 3));
    rf_output c = rf_placeholder(g, "c", RF_BOOL, rf_shape_of(1, 3));
    rf_output y;
    switch (k) {
      case 0: y = rf_tile(g, "y", b, (int64_t[]){2}, 1); break;
      case 1: y = rf_select(g, "y", c, b, b); break;
      case 2: y = rf_concat(g, "y", (rf_output[]){b, b}, 2, 0); break;
      case 3: y = rf_transpose(g, "y", b, NULL, 0); break;
      default:
        y = rf_gather(g, "y", b, rf_const_scalar(g, NULL, RF_INT32, 1), 0);
        break;
    }
    assert_graph_ok(g);
    rf_output dx = {(rf_node *)1, 5};
    assert_ok(rf_gradients(g, &y, 1, &b, 1, NULL, &dx));
    assert_null(dx.node);
    assert_graph_ok(g);
    rf_graph_free(g);
  }
  /* A float loss through a bool-free path is untouched by the rule. */
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output c = rf_placeholder(g, "c", RF_BOOL, rf_shape_of(1, 3));
  rf_output y = rf_select(g, "y", c, x, rf_zeros_like(g, NULL, x));
  rf_output dxs[2];
  rf_output xs[2] = {x, c};
  assert_ok(rf_gradients(g, &y, 1, xs, 2, NULL, dxs));
  assert_non_null(dxs[0].node);
  assert_null(dxs[1].node);
  rf_graph_free(g);
}

/* A cycle through data edges (only constructible by editing edges) is an
 * error, not a hang. */
static void test_cycle(void **state) {
  (void)state;
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output a = op1(g, "TestUnary", "a", x);
  rf_output b = op1(g, "TestUnary", "b", a);
  assert_ok(rf__graph_update_edge(g, a.node, 0, b.node, 0));
  rf_output dx;
  assert_status(rf_gradients(g, &b, 1, &b, 1, NULL, &dx), RF_INVALID_ARGUMENT,
                "cycle");
  rf_graph_free(g);
}

/* A long chain: no recursion, every node visited once. */
static void test_long_chain(void **state) {
  (void)state;
  enum { N = 5000 };
  rf_graph *g = new_graph();
  rf_output x = x_placeholder(g, "x");
  rf_output y = x;
  for (int i = 0; i < N; i++) y = op1(g, "TestUnary", NULL, y);
  int before = rf_graph_num_nodes(g);
  rf_output dx;
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_int_equal(rf_graph_num_nodes(g), before + N + 1);
  for (int i = 0; i < N; i++) {
    assert_op(dx, "TestGrad");
    dx = input_of(dx, 0);
  }
  assert_op(dx, "OnesLike");
  rf_graph_free(g);
}

/* Every allocation failure returns RESOURCE_EXHAUSTED, leaves dxs alone and
 * leaks nothing once the graph is freed. */
static void test_allocation_failures(void **state) {
  (void)state;
  int64_t live = rf_debug_live_allocations();
  bool succeeded = false;
  for (int k = 1; !succeeded && k < 10000; k++) {
    rf_graph *g = new_graph();
    rf_output x = x_placeholder(g, "x");
    rf_output br = op1(g, "TestUnsummed", "br", x);
    rf_output a = op1(g, "TestUnary", "a", br);
    rf_output b = op1(g, "TestUnary", "b", br);
    rf_output y = op2(g, "TestBinary", "y", a, b);
    rf_output xs[2] = {x, br};
    rf_output dx[2] = {{x.node, 9}, {x.node, 9}};
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf_gradients(g, &y, 1, xs, 2, NULL, dx);
    rf_debug_fail_allocation_after(0);
    if (st) {
      assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
      assert_int_equal(dx[0].index, 9);
      assert_int_equal(dx[1].index, 9);
    } else {
      succeeded = true;
      assert_op(dx[0], "TestGrad");
      assert_op(dx[1], "AddN");
    }
    rf_graph_free(g);
    assert_int_equal(rf_debug_live_allocations(), live);
  }
  assert_true(succeeded);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_path),
      cmocka_unit_test(test_sum_two_contributions),
      cmocka_unit_test(test_unsummed_delivery),
      cmocka_unit_test(test_no_gradient_stops),
      cmocka_unit_test(test_missing_grad_fn),
      cmocka_unit_test(test_device_scope),
      cmocka_unit_test(test_x_not_reaching_y),
      cmocka_unit_test(test_grad_ys),
      cmocka_unit_test(test_repeats_and_identity),
      cmocka_unit_test(test_multi_output_partial),
      cmocka_unit_test(test_argument_errors),
      cmocka_unit_test(test_grad_fn_errors),
      cmocka_unit_test(test_bool_carries_no_gradient),
      cmocka_unit_test(test_cycle),
      cmocka_unit_test(test_long_chain),
      cmocka_unit_test(test_allocation_failures),
  };
  return cmocka_run_group_tests(tests, setup_ops, NULL);
}
