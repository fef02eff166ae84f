/* ops/batch_norm_ops.c - batch normalization over every axis but the last
 * (x of shape [..., C], C the channel axis, as NHWC and [N, C]):
 *   BatchNorm(x, gamma, beta) -> y, batch_mean, batch_variance
 *     normalises with the batch's statistics (training);
 *   BatchNormInference(x, gamma, beta, mean, variance) -> y
 *     normalises with given statistics (the moving averages; also the
 *     per-device step of synchronized batch norm, sync_batch_norm.c).
 * y = (x - mean) / sqrt(variance + epsilon) * gamma + beta, the variance
 * biased (divided by the count). Their gradient ops recompute the statistics
 * rather than keeping them from the forward pass (as _LayerNormGrad):
 *   _BatchNormGrad(dy, x, gamma, dmean, dvariance) -> dx, dgamma, dbeta
 *     through the batch statistics, dmean and dvariance being the gradients
 *     that reach BatchNorm's own mean and variance outputs (zeros if none);
 *   _BatchNormInferenceGrad(dy, x, gamma, mean, variance)
 *     -> dx, dgamma, dbeta, dmean, dvariance. */
#include "core/shape.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static const char *const param_names[] = {"gamma", "beta", "mean", "variance"};

/* epsilon >= 0; x (input xi) of rank >= 2; inputs first .. first + n - 1,
 * named names[0 .. n-1], of shape [C] (C x's last dim) where known. */
static rf_status *check_params(rf__shape_ctx *c, int xi, int first, int n,
                               const char *const *names) {
  const rf_shape *x = &c->input_shapes[xi];
  double eps;
  RF_CHECK(rf__attrs_get_float(&c->node->attrs, "epsilon", &eps));
  if (!(eps >= 0)) return rf__invalid("epsilon %g must be >= 0", eps);
  if (x->rank >= 0 && x->rank < 2) {
    char xs[96];
    rf_shape_format(x, xs, sizeof xs);
    return rf__invalid(
        "x %s must have rank >= 2 ([..., C]: statistics over every axis but "
        "the last)",
        xs);
  }
  int64_t last = x->rank > 0 ? x->dims[x->rank - 1] : -1;
  for (int k = 0; k < n; k++) {
    const rf_shape *p = &c->input_shapes[first + k];
    if (p->rank < 0) continue;
    if (p->rank != 1 || (last >= 0 && p->dims[0] >= 0 && p->dims[0] != last)) {
      char xs[96], ps[96];
      rf_shape_format(x, xs, sizeof xs);
      rf_shape_format(p, ps, sizeof ps);
      return rf__invalid("%s %s must be [C], C the last dim of x %s", names[k],
                         ps, xs);
    }
  }
  return NULL;
}

/* [C] from x's shape: unknown where x's rank or last dim is. */
static rf_shape channel_shape(const rf_shape *x) {
  return rf_shape_of(1, x->rank > 0 ? x->dims[x->rank - 1] : -1);
}

static rf_status *batch_norm_shape(rf__shape_ctx *c) {
  RF_CHECK(check_params(c, 0, 1, 2, param_names));
  c->output_shapes[0] = c->input_shapes[0];
  c->output_shapes[1] = c->output_shapes[2] =
      channel_shape(&c->input_shapes[0]);
  return NULL;
}

static rf_status *batch_norm_inference_shape(rf__shape_ctx *c) {
  RF_CHECK(check_params(c, 0, 1, 4, param_names));
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* dy (input 0) and x (input 1) of one shape where known. */
static rf_status *check_dy(rf__shape_ctx *c) {
  return rf__shape_agree("dy", &c->input_shapes[0], "x", &c->input_shapes[1]);
}

/* _BatchNormGrad(dy, x, gamma, dmean, dvariance) */
static rf_status *batch_norm_grad_shape(rf__shape_ctx *c) {
  static const char *const names[] = {"gamma", "dmean", "dvariance"};
  RF_CHECK(check_dy(c));
  RF_CHECK(check_params(c, 1, 2, 3, names));
  const rf_shape *a = &c->input_shapes[0], *b = &c->input_shapes[1];
  c->output_shapes[0] = b->rank >= 0 ? *b : *a;
  c->output_shapes[1] = c->output_shapes[2] = channel_shape(b);
  return NULL;
}

/* _BatchNormInferenceGrad(dy, x, gamma, mean, variance) */
static rf_status *batch_norm_inference_grad_shape(rf__shape_ctx *c) {
  static const char *const names[] = {"gamma", "mean", "variance"};
  RF_CHECK(check_dy(c));
  RF_CHECK(check_params(c, 1, 2, 3, names));
  const rf_shape *a = &c->input_shapes[0], *b = &c->input_shapes[1];
  c->output_shapes[0] = b->rank >= 0 ? *b : *a;
  for (int i = 1; i < 5; i++) c->output_shapes[i] = channel_shape(b);
  return NULL;
}

/* A gradient that reaches output k, else zeros like that output. */
static rf_output dy_or_zeros(rf__grad_ctx *c, int k) {
  return c->dy[k].node ? c->dy[k]
                       : rf_zeros_like(c->g, NULL, (rf_output){c->op, k});
}

static rf_status *batch_norm_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node && !c->dy[1].node && !c->dy[2].node) return NULL;
  double eps;
  RF_CHECK(rf__attrs_get_float(&c->op->attrs, "epsilon", &eps));
  rf_output in[5] = {dy_or_zeros(c, 0), rf__input(c->op, 0),
                     rf__input(c->op, 1), dy_or_zeros(c, 1), dy_or_zeros(c, 2)};
  if (!rf__graph_inputs_ok(c->g, "_BatchNormGrad", NULL, in, 5))
    return NULL; /* recorded in the graph */
  rf_node_builder *b = rf_node_builder_new(c->g, "_BatchNormGrad", NULL);
  for (int i = 0; i < 5; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_float(b, "epsilon", eps);
  rf_node *n = rf__finish_node(c->g, b);
  if (!n) return NULL; /* recorded in the graph */
  for (int i = 0; i < 3; i++) c->dx[i] = (rf_output){n, i};
  return NULL;
}

static rf_status *batch_norm_inference_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  double eps;
  RF_CHECK(rf__attrs_get_float(&c->op->attrs, "epsilon", &eps));
  rf_node_builder *b =
      rf_node_builder_new(c->g, "_BatchNormInferenceGrad", NULL);
  rf_node_builder_input(b, c->dy[0]);
  rf_node_builder_input(b, rf__input(c->op, 0));
  for (int i = 1; i < 5; i++)
    if (i != 2) rf_node_builder_input(b, rf__input(c->op, i));
  rf_node_builder_attr_float(b, "epsilon", eps);
  rf_node *n = rf__finish_node(c->g, b);
  if (!n) return NULL; /* recorded in the graph */
  /* outputs dx, dgamma, dbeta, dmean, dvariance; inputs x, gamma, beta,
   * mean, variance */
  for (int i = 0; i < 5; i++) c->dx[i] = (rf_output){n, i};
  return NULL;
}

#define RF_BN_ATTRS "T: type in {@float}; epsilon: float = 0.001"

static const rf__op_spec batch_norm_ops[] = {
    {.name = "BatchNorm",
     .inputs = "x: T, gamma: T, beta: T",
     .outputs = "y: T, batch_mean: T, batch_variance: T",
     .attrs = RF_BN_ATTRS,
     .shape = batch_norm_shape,
     .grad = batch_norm_grad},
    {.name = "BatchNormInference",
     .inputs = "x: T, gamma: T, beta: T, mean: T, variance: T",
     .outputs = "y: T",
     .attrs = RF_BN_ATTRS,
     .shape = batch_norm_inference_shape,
     .grad = batch_norm_inference_grad},
    /* No gradients registered: a second derivative is refused, not zero. */
    {.name = "_BatchNormGrad",
     .inputs = "dy: T, x: T, gamma: T, dmean: T, dvariance: T",
     .outputs = "dx: T, dgamma: T, dbeta: T",
     .attrs = RF_BN_ATTRS,
     .shape = batch_norm_grad_shape},
    {.name = "_BatchNormInferenceGrad",
     .inputs = "dy: T, x: T, gamma: T, mean: T, variance: T",
     .outputs = "dx: T, dgamma: T, dbeta: T, dmean: T, dvariance: T",
     .attrs = RF_BN_ATTRS,
     .shape = batch_norm_inference_grad_shape},
};

rf_status *rf__register_batch_norm_ops(void) {
  for (size_t i = 0; i < sizeof batch_norm_ops / sizeof batch_norm_ops[0]; i++)
    RF_CHECK(rf__op_register(&batch_norm_ops[i]));
  return NULL;
}

rf_output rf_batch_norm_training(rf_graph *g, const char *name, rf_output x,
                                 rf_output gamma, rf_output beta,
                                 double epsilon, rf_output *batch_mean,
                                 rf_output *batch_variance) {
  rf_output in[3] = {x, gamma, beta};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "BatchNorm", name, in, 3))
    return (rf_output){NULL, 0};
  rf_node_builder *b = rf_node_builder_new(g, "BatchNorm", name);
  for (int i = 0; i < 3; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_float(b, "epsilon", epsilon);
  rf_node *n = rf__finish_node(g, b);
  if (!n) return (rf_output){NULL, 0};
  if (batch_mean) *batch_mean = (rf_output){n, 1};
  if (batch_variance) *batch_variance = (rf_output){n, 2};
  return (rf_output){n, 0};
}

rf_output rf_batch_norm_inference(rf_graph *g, const char *name, rf_output x,
                                  rf_output gamma, rf_output beta,
                                  rf_output mean, rf_output variance,
                                  double epsilon) {
  rf_output in[5] = {x, gamma, beta, mean, variance};
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "BatchNormInference", name, in, 5))
    return (rf_output){NULL, 0};
  rf_node_builder *b = rf_node_builder_new(g, "BatchNormInference", name);
  for (int i = 0; i < 5; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_float(b, "epsilon", epsilon);
  return rf__finish_output(g, b);
}
