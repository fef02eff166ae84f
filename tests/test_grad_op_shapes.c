/* tests/test_grad_op_shapes.c - the gradient ops that take dy beside the
 * forward's input (_GeluGrad, _LayerNormGrad, _BatchNormGrad: dy and x;
 * _GatherGrad: dy and the gather's shape) refuse, when the node is built, a
 * dy whose shape cannot be that one: another rank or a known dim that
 * differs is INVALID_ARGUMENT naming both shapes. Unknown ranks and dims
 * agree with anything. The nodes are built through the public node
 * builder, as the gradient builder makes them. */
#include <string.h>

#include "testutil.h"

/* A node of op on placeholders: dy, x (or _GatherGrad's indices (4) of
 * int32 and `like` x), then the per-channel inputs as [?]. */
static rf_status *grad_node(const char *op, rf_shape dy, rf_shape x) {
  rf_graph *g = rf_graph_new();
  rf_node_builder *b = rf_node_builder_new(g, op, "g");
  rf_node_builder_input(b, rf_placeholder(g, "dy", RF_FLOAT32, dy));
  bool gather = strcmp(op, "_GatherGrad") == 0;
  if (gather)
    rf_node_builder_input(b,
                          rf_placeholder(g, "i", RF_INT32, rf_shape_of(1, 4)));
  rf_node_builder_input(b, rf_placeholder(g, "x", RF_FLOAT32, x));
  int params = strcmp(op, "_LayerNormGrad") == 0   ? 1
               : strcmp(op, "_BatchNormGrad") == 0 ? 3
                                                   : 0;
  for (int i = 0; i < params; i++)
    rf_node_builder_input(
        b, rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(1, -1)));
  rf_node *n = NULL;
  rf_status *st = rf_node_builder_finish(b, &n);
  rf_graph_free(g);
  return st;
}

static void test_dy_against_x(void **state) {
  (void)state;
  const char *ops[] = {"_GeluGrad", "_LayerNormGrad", "_BatchNormGrad"};
  for (int k = 0; k < 3; k++) {
    const char *op = ops[k];
    /* a known dim differs */
    assert_status(
        grad_node(op, rf_shape_of(3, 2, 5, 3), rf_shape_of(3, 2, 5, 4)),
        RF_INVALID_ARGUMENT, "dy (2, 5, 3) and x (2, 5, 4) differ");
    /* the ranks differ */
    assert_status(grad_node(op, rf_shape_of(2, 2, 5), rf_shape_of(3, 2, 5, 4)),
                  RF_INVALID_ARGUMENT, "dy (2, 5) and x (2, 5, 4) differ");
    /* unknown dims and ranks agree with anything */
    assert_ok(
        grad_node(op, rf_shape_of(3, -1, 5, 4), rf_shape_of(3, 2, -1, 4)));
    assert_ok(grad_node(op, rf_shape_unknown(), rf_shape_of(3, 2, 5, 4)));
    assert_ok(grad_node(op, rf_shape_of(3, 2, 5, 4), rf_shape_unknown()));
    assert_ok(grad_node(op, rf_shape_of(3, 2, 5, 4), rf_shape_of(3, 2, 5, 4)));
  }
}

/* Gather of 4 indices along axis 0 of like (5, 3) gives (4, 3). */
static void test_gather_grad_dy(void **state) {
  (void)state;
  rf_shape like = rf_shape_of(2, 5, 3);
  assert_status(grad_node("_GatherGrad", rf_shape_of(2, 4, 2), like),
                RF_INVALID_ARGUMENT,
                "dy has shape (4, 2) but the gather gives (4, 3)");
  assert_status(grad_node("_GatherGrad", rf_shape_of(1, 4), like),
                RF_INVALID_ARGUMENT,
                "dy has shape (4) but the gather gives (4, 3)");
  assert_ok(grad_node("_GatherGrad", rf_shape_of(2, 4, 3), like));
  assert_ok(grad_node("_GatherGrad", rf_shape_of(2, -1, 3), like));
  assert_ok(grad_node("_GatherGrad", rf_shape_unknown(), like));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dy_against_x),
      cmocka_unit_test(test_gather_grad_dy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
