/* ops/layer_norm_ops.c - LayerNorm over the last axis, y = (x - mean) /
 * sqrt(var + epsilon) * gamma + beta (var the biased variance, as PyTorch's
 * torch.nn.LayerNorm, epsilon 1e-5 by default), and its gradient op
 * _LayerNormGrad (dy, x, gamma -> dx, dgamma, dbeta), which recomputes each
 * row's mean and variance rather than keeping them from the forward pass. */
#include "core/shape.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

/* epsilon >= 0; x (input xi) of rank >= 1; inputs [first, first + n)
 * (gamma, beta) of shape [C] with C the last dim of x, where known. */
static rf_status *check_params(rf__shape_ctx *c, int xi, int first, int n) {
  const rf_shape *x = &c->input_shapes[xi];
  double eps;
  RF_CHECK(rf__attrs_get_float(&c->node->attrs, "epsilon", &eps));
  if (!(eps >= 0)) return rf__invalid("epsilon %g must be >= 0", eps);
  if (x->rank == 0)
    return rf__invalid("x must have rank >= 1 (the normalised axis)");
  int64_t last = x->rank > 0 ? x->dims[x->rank - 1] : -1;
  for (int k = first; k < first + n; k++) {
    const rf_shape *p = &c->input_shapes[k];
    if (p->rank < 0) continue;
    if (p->rank != 1 || (last >= 0 && p->dims[0] >= 0 && p->dims[0] != last)) {
      char xs[96], ps[96];
      rf_shape_format(x, xs, sizeof xs);
      rf_shape_format(p, ps, sizeof ps);
      return rf__invalid("%s %s must be [C], C the last dim of x %s",
                         k == first ? "gamma" : "beta", ps, xs);
    }
  }
  return NULL;
}

static rf_status *layer_norm_shape(rf__shape_ctx *c) {
  RF_CHECK(check_params(c, 0, 1, 2));
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* _LayerNormGrad(dy, x, gamma): dy and x of one shape where known; gamma
 * checked as in LayerNorm. */
static rf_status *layer_norm_grad_shape(rf__shape_ctx *c) {
  const rf_shape *a = &c->input_shapes[0], *b = &c->input_shapes[1];
  RF_CHECK(rf__shape_agree("dy", a, "x", b));
  RF_CHECK(check_params(c, 1, 2, 1));
  c->output_shapes[0] = b->rank >= 0 ? *b : *a;
  c->output_shapes[1] = c->output_shapes[2] = c->input_shapes[2];
  return NULL;
}

static rf_status *layer_norm_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  double eps;
  RF_CHECK(rf__attrs_get_float(&c->op->attrs, "epsilon", &eps));
  rf_node_builder *b = rf_node_builder_new(c->g, "_LayerNormGrad", NULL);
  rf_node_builder_input(b, c->dy[0]);
  rf_node_builder_input(b, rf__input(c->op, 0));
  rf_node_builder_input(b, rf__input(c->op, 1));
  rf_node_builder_attr_float(b, "epsilon", eps);
  rf_node *n = rf__finish_node(c->g, b);
  if (!n) return NULL; /* recorded in the graph */
  for (int i = 0; i < 3; i++) c->dx[i] = (rf_output){n, i};
  return NULL;
}

static const rf__op_spec layer_norm_ops[] = {
    {.name = "LayerNorm",
     .inputs = "x: T, gamma: T, beta: T",
     .outputs = "y: T",
     .attrs = "T: type in {@float}; epsilon: float = 1e-5",
     .shape = layer_norm_shape,
     .grad = layer_norm_grad},
    /* No gradient registered: a second derivative is refused, not zero. */
    {.name = "_LayerNormGrad",
     .inputs = "dy: T, x: T, gamma: T",
     .outputs = "dx: T, dgamma: T, dbeta: T",
     .attrs = "T: type in {@float}; epsilon: float = 1e-5",
     .shape = layer_norm_grad_shape},
};

rf_status *rf__register_layer_norm_ops(void) {
  for (size_t i = 0; i < sizeof layer_norm_ops / sizeof layer_norm_ops[0]; i++)
    RF_CHECK(rf__op_register(&layer_norm_ops[i]));
  return NULL;
}

rf_output rf_layer_norm(rf_graph *g, const char *name, rf_output x,
                        rf_output gamma, rf_output beta, double epsilon) {
  rf_output in[3] = {x, gamma, beta};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "LayerNorm", name, in, 3))
    return (rf_output){NULL, 0};
  rf_node_builder *b = rf_node_builder_new(g, "LayerNorm", name);
  for (int i = 0; i < 3; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_float(b, "epsilon", epsilon);
  return rf__finish_output(g, b);
}
