/* ops/gelu_ops.c - GELU (TensorFlow's tf.nn.gelu: exact 0.5 x (1 + erf(x /
 * sqrt 2)) by default, the tanh approximation 0.5 x (1 + tanh(sqrt(2 / pi)
 * (x + 0.044715 x^3))) with approximate = true), its gradient ops _GeluGrad
 * (dy * gelu'(x)) and _GeluSecond (gelu''(x), for gradients of gradients),
 * and Softmax along any axis, built from Transpose and the last-axis
 * Softmax. */
#include "core/shape.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static rf_status *same_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* _GeluGrad(dy, x): dy and x of one shape (where both are known). */
static rf_status *grad_shape(rf__shape_ctx *c) {
  const rf_shape *a = &c->input_shapes[0], *b = &c->input_shapes[1];
  RF_CHECK(rf__shape_agree("dy", a, "x", b));
  c->output_shapes[0] = b->rank >= 0 ? *b : *a;
  return NULL;
}

static rf_output internal(rf_graph *g, const char *op, const rf_output *in,
                          int n, bool approximate) {
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_bool(b, "approximate", approximate);
  return rf__finish_output(g, b);
}

static rf_status *gelu_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  bool approx;
  RF_CHECK(rf__attrs_get_bool(&c->op->attrs, "approximate", &approx));
  rf_output in[2] = {c->dy[0], rf__input(c->op, 0)};
  c->dx[0] = internal(c->g, "_GeluGrad", in, 2, approx);
  return NULL;
}

/* _GeluGrad = dy * gelu'(x): d/d dy = gelu'(x), d/dx = dy * gelu''(x). */
static rf_status *gelu_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  bool approx;
  RF_CHECK(rf__attrs_get_bool(&c->op->attrs, "approximate", &approx));
  rf_output dy = rf__input(c->op, 0), x = rf__input(c->op, 1);
  rf_output in[2] = {c->dy[0], x};
  c->dx[0] = internal(c->g, "_GeluGrad", in, 2, approx);
  rf_output second = internal(c->g, "_GeluSecond", &x, 1, approx);
  c->dx[1] = rf_mul(c->g, NULL, rf_mul(c->g, NULL, c->dy[0], dy), second);
  return NULL;
}

static const rf__op_spec gelu_ops[] = {
    {.name = "Gelu",
     .inputs = "features: T",
     .outputs = "activations: T",
     .attrs = "T: type in {@float}; approximate: bool = false",
     .shape = same_shape,
     .grad = gelu_grad},
    {.name = "_GeluGrad",
     .inputs = "dy: T, x: T",
     .outputs = "dx: T",
     .attrs = "T: type in {@float}; approximate: bool = false",
     .shape = grad_shape,
     .grad = gelu_grad_grad},
    /* No gradient registered: a third derivative is refused, not zero. */
    {.name = "_GeluSecond",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type in {@float}; approximate: bool = false",
     .shape = same_shape},
};

rf_status *rf__register_gelu_ops(void) {
  for (size_t i = 0; i < sizeof gelu_ops / sizeof gelu_ops[0]; i++)
    RF_CHECK(rf__op_register(&gelu_ops[i]));
  return NULL;
}

rf_output rf_gelu(rf_graph *g, const char *name, rf_output x,
                  bool approximate) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Gelu", name, &x, 1))
    return (rf_output){NULL, 0};
  rf_node_builder *b = rf_node_builder_new(g, "Gelu", name);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_bool(b, "approximate", approximate);
  return rf__finish_output(g, b);
}

rf_output rf_softmax_axis(rf_graph *g, const char *name, rf_output x,
                          int64_t axis) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Softmax", name, &x, 1))
    return (rf_output){NULL, 0};
  rf_shape s = rf_output_shape(x);
  if (s.rank < 1 || axis < -s.rank || axis >= s.rank) {
    rf__graph_refuse(g, "Softmax", name,
                     "axis %lld needs x's rank known and >= 1, and the "
                     "axis in [-rank, rank) (rank %d)",
                     (long long)axis, s.rank);
    return (rf_output){NULL, 0};
  }
  if (axis < 0) axis += s.rank;
  if (axis == s.rank - 1) return rf_softmax(g, name, x);
  /* Softmax's own check, made here so that it names this node rather than
   * the inner Softmax below. */
  rf_dtype t = rf_output_dtype(x);
  if (!rf_dtype_is_float(t)) {
    rf__graph_refuse(g, "Softmax", name,
                     "attr 'T' is %s, not one of {float16, bfloat16, "
                     "float32, float64}",
                     rf_dtype_name(t));
    return (rf_output){NULL, 0};
  }
  /* swap axis and the last dim: the permutation is its own inverse */
  int64_t perm[RF_MAX_RANK];
  for (int i = 0; i < s.rank; i++) perm[i] = i;
  perm[axis] = s.rank - 1;
  perm[s.rank - 1] = axis;
  int first_new = g->num_ids;
  rf_output y = rf_transpose(
      g, name, rf_softmax(g, NULL, rf_transpose(g, NULL, x, perm, s.rank)),
      perm, s.rank);
  if (rf__graph_failed(g)) /* nothing half-built stays behind */
    for (int id = g->num_ids - 1; id >= first_new; id--)
      if (g->nodes[id]) rf__graph_remove_node(g, g->nodes[id]);
  return y;
}
