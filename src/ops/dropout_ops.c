/* ops/dropout_ops.c - Dropout with a stateless generator: output 0 is x *
 * mask, output 1 the mask (0 or 1 / (1 - rate)), each element's keep
 * decision a pure function of (seed, step, device, element index)
 * (kernels/philox.h), so replicas and re-runs are reproducible and nothing
 * is stored between steps. The gradient is dy * mask: the mask output is
 * what ties the backward pass to the forward pass's decisions, wherever
 * the gradient runs. */
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static rf_status *dropout_shape(rf__shape_ctx *c) {
  double rate;
  RF_CHECK(rf__attrs_get_float(&c->node->attrs, "rate", &rate));
  if (!(rate >= 0 && rate < 1))
    return rf__invalid("rate %g must be in [0, 1)", rate);
  c->output_shapes[0] = c->output_shapes[1] = c->input_shapes[0];
  return NULL;
}

static rf_status *dropout_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL; /* the mask itself has no gradient */
  c->dx[0] = rf_mul(c->g, NULL, c->dy[0], (rf_output){c->op, 1});
  return NULL;
}

static const rf__op_spec dropout = {
    .name = "Dropout",
    .inputs = "x: T",
    .outputs = "output: T, mask: T",
    .attrs = "T: type in {@float}; rate: float; seed: int = 0",
    .shape = dropout_shape,
    .grad = dropout_grad,
    .flags = RF_OP_STATEFUL}; /* depends on the step: never folded */

rf_status *rf__register_dropout_ops(void) { return rf__op_register(&dropout); }

rf_output rf_dropout(rf_graph *g, const char *name, rf_output x, double rate,
                     int64_t seed) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Dropout", name, &x, 1))
    return (rf_output){NULL, 0};
  rf_node_builder *b = rf_node_builder_new(g, "Dropout", name);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_float(b, "rate", rate);
  rf_node_builder_attr_int(b, "seed", seed);
  return rf__finish_output(g, b);
}
