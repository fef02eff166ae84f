/* ops/state_ops.c - variables and their updates: Variable, ReadVariable,
 * Assign, AssignMul, ApplyGradientDescent, ApplyAdam, ApplyAdamW, ApplyMomentum
 * (and the internal _MultiApply* forms of the last three, and _MultiAssignMul).
 * All are stateful (never pruned as duplicates, never folded) and not
 * differentiable: users take gradients with respect to a ReadVariable's output.
 * The builders check dtypes and shapes against the Variable node when the
 * handle comes straight from one, so most mistakes fail at build time; the
 * kernels check again at run time. */
#include <string.h>

#include "core/shape.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static const rf_output invalid_output = {NULL, 0};

/* ---- shape functions ---- */

static rf_status *scalar_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = rf_shape_scalar();
  return NULL;
}

static rf_status *read_shape(rf__shape_ctx *c) {
  return rf__attrs_get_shape(&c->node->attrs, "shape", &c->output_shapes[0]);
}

/* Inputs [first, first+n) of a known rank must be scalars. */
static rf_status *check_scalars(rf__shape_ctx *c, int first, int n) {
  for (int k = first; k < first + n && k < c->num_inputs; k++) {
    const rf_shape *s = &c->input_shapes[k];
    if (s->rank > 0) {
      char buf[128];
      rf_shape_format(s, buf, sizeof buf);
      return rf__invalid("input %d must be a scalar, got shape %s", k, buf);
    }
  }
  return NULL;
}

static rf_status *assign_mul_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[1]; /* the value's: the variable's */
  return NULL;
}

/* N handles then N values: each new value has its value's shape. */
static rf_status *multi_assign_mul_shape(rf__shape_ctx *c) {
  int n = c->num_outputs;
  for (int i = 0; i < n; i++) c->output_shapes[i] = c->input_shapes[n + i];
  return NULL;
}

static rf_status *apply_gd_shape(rf__shape_ctx *c) {
  return check_scalars(c, 1, 1); /* alpha */
}

static rf_status *apply_adam_shape(rf__shape_ctx *c) {
  return check_scalars(c, 3, 6); /* beta1_power .. epsilon */
}

static rf_status *apply_adamw_shape(rf__shape_ctx *c) {
  return check_scalars(c, 3, 7); /* beta1_power .. weight_decay */
}

static rf_status *apply_momentum_shape(rf__shape_ctx *c) {
  RF_CHECK(check_scalars(c, 2, 1)); /* lr */
  return check_scalars(c, 4, 1);    /* momentum */
}

/* _MultiApply*: nvars lists of N handles, `before` scalars, the N
 * gradients, `after` scalars. */
static rf_status *multi_shape(rf__shape_ctx *c, int nvars, int before,
                              int after) {
  int64_t n;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "N", &n));
  int first = nvars * (int)n;
  RF_CHECK(check_scalars(c, first, before));
  return check_scalars(c, first + before + (int)n, after);
}

static rf_status *multi_adam_shape(rf__shape_ctx *c) {
  return multi_shape(c, 3, 6, 0);
}

static rf_status *multi_adamw_shape(rf__shape_ctx *c) {
  return multi_shape(c, 3, 7, 0);
}

static rf_status *multi_momentum_shape(rf__shape_ctx *c) {
  return multi_shape(c, 2, 1, 1);
}

/* ---- registration ---- */

#define ADAM_INPUTS                                           \
  "var: resource, m: resource, v: resource, beta1_power: T, " \
  "beta2_power: T, lr: T, beta1: T, beta2: T, epsilon: T, grad: T"

#define ADAMW_INPUTS                                          \
  "var: resource, m: resource, v: resource, beta1_power: T, " \
  "beta2_power: T, lr: T, beta1: T, beta2: T, epsilon: T, "   \
  "weight_decay: T, grad: T"

/* The multi-tensor forms take the beta powers in their own dtype Tpower:
 * T, or float64 with T float32 (the grouping pass then reads a float64
 * power straight from its variable; the kernels round it to float32 as the
 * Cast it replaces did). */
#define MULTI_ADAM_INPUTS(extra)                                          \
  "var: N * resource, m: N * resource, v: N * resource, "                 \
  "beta1_power: Tpower, beta2_power: Tpower, lr: T, beta1: T, beta2: T, " \
  "epsilon: T, " extra "grad: N * T"

static const rf__op_spec state_ops[] = {
    {.name = "Variable",
     .outputs = "resource: resource",
     .attrs = "dtype: type in {@all}; shape: shape",
     .shape = scalar_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "ReadVariable",
     .inputs = "resource: resource",
     .outputs = "value: dtype",
     .attrs = "dtype: type in {@all}; shape: shape",
     .shape = read_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "Assign",
     .inputs = "resource: resource, value: dtype",
     .attrs = "dtype: type in {@all}",
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "AssignMul",
     .inputs = "resource: resource, value: dtype",
     .outputs = "new_value: dtype",
     .attrs = "dtype: type in {@float}",
     .shape = assign_mul_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    /* N AssignMuls of one device and dtype as one node
     * (passes/group_updates.c): one kernel on a GPU. */
    {.name = "_MultiAssignMul",
     .inputs = "resource: N * resource, value: N * dtype",
     .outputs = "new_value: N * dtype",
     .attrs = "dtype: type in {@float}; N: int >= 1",
     .shape = multi_assign_mul_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "ApplyGradientDescent",
     .inputs = "var: resource, alpha: T, delta: T",
     .attrs = "T: type in {@float}",
     .shape = apply_gd_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "ApplyAdam",
     .inputs = ADAM_INPUTS,
     .attrs = "T: type in {@float}",
     .shape = apply_adam_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "ApplyMomentum",
     .inputs = "var: resource, accum: resource, lr: T, grad: T, momentum: T",
     .attrs = "T: type in {@float}; use_nesterov: bool = false",
     .shape = apply_momentum_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "ApplyAdamW",
     .inputs = ADAMW_INPUTS,
     .attrs = "T: type in {@float}",
     .shape = apply_adamw_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    /* N updates of one kind with the same scalars as one node
     * (passes/group_updates.c): each handle and the gradient become lists,
     * the scalars stay single, in the order of the op above. */
    {.name = "_MultiApplyAdam",
     .inputs = MULTI_ADAM_INPUTS(""),
     .attrs = "T: type in {@float}; Tpower: type in {@float}; N: int >= 1",
     .shape = multi_adam_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "_MultiApplyMomentum",
     .inputs = "var: N * resource, accum: N * resource, lr: T, grad: N * T, "
               "momentum: T",
     .attrs = "T: type in {@float}; N: int >= 1; use_nesterov: bool = false",
     .shape = multi_momentum_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
    {.name = "_MultiApplyAdamW",
     .inputs = MULTI_ADAM_INPUTS("weight_decay: T, "),
     .attrs = "T: type in {@float}; Tpower: type in {@float}; N: int >= 1",
     .shape = multi_adamw_shape,
     .flags = RF_OP_STATEFUL | RF_OP_NO_GRADIENT},
};

rf_status *rf__register_state_ops(void) {
  for (size_t i = 0; i < sizeof state_ops / sizeof state_ops[0]; i++)
    RF_CHECK(rf__op_register(&state_ops[i]));
  return NULL;
}

/* ---- public builders ---- */

/* The dtype and shape of the Variable behind `var`. Returns false (and
 * records an error) when var is not a resource; *known is false when var does
 * not come straight from a Variable node (only run time can check then). */
static bool variable_info(rf_graph *g, const char *op, const char *name,
                          rf_output var, bool *known, rf_dtype *dtype,
                          rf_shape *shape) {
  *known = false;
  if (rf_output_dtype(var) != RF_RESOURCE) {
    rf__graph_refuse(
        g, op, name, "the variable input %s is a %s tensor, not a resource",
        rf_node_name(var.node), rf_dtype_name(rf_output_dtype(var)));
    return false;
  }
  if (strcmp(rf_node_op(var.node), "Variable") != 0) return true;
  rf_status *st = rf_node_attr_dtype(var.node, "dtype", dtype);
  if (!st) st = rf_node_attr_shape(var.node, "shape", shape);
  if (st) {
    rf__graph_record(g, st);
    return false;
  }
  *known = true;
  return true;
}

/* Records an error when `value` cannot be stored in the variable `var`. */
static bool value_fits(rf_graph *g, const char *op, const char *name,
                       const char *what, rf_output var, rf_output value) {
  bool known;
  rf_dtype dtype;
  rf_shape shape, vshape = rf_output_shape(value);
  if (!variable_info(g, op, name, var, &known, &dtype, &shape)) return false;
  if (!known) return true;
  const char *vname = rf_node_name(var.node);
  if (rf_output_dtype(value) != dtype) {
    rf__graph_refuse(g, op, name, "%s is %s but variable '%s' is %s", what,
                     rf_dtype_name(rf_output_dtype(value)), vname,
                     rf_dtype_name(dtype));
    return false;
  }
  if (!rf__shape_compatible(&shape, &vshape)) {
    char a[128], b[128];
    rf_shape_format(&vshape, a, sizeof a);
    rf_shape_format(&shape, b, sizeof b);
    rf__graph_refuse(g, op, name,
                     "%s has shape %s but variable '%s' has shape %s", what, a,
                     vname, b);
    return false;
  }
  return true;
}

rf_output rf_variable(rf_graph *g, const char *name, rf_dtype dtype,
                      rf_shape shape) {
  if (rf__graph_failed(g)) return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Variable", name);
  rf_node_builder_attr_dtype(b, "dtype", dtype);
  rf_node_builder_attr_shape(b, "shape", shape);
  return rf__finish_output(g, b);
}

rf_output rf_read_variable(rf_graph *g, const char *name, rf_output var) {
  bool known;
  rf_dtype dtype;
  rf_shape shape;
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "ReadVariable", name, &var, 1) ||
      !variable_info(g, "ReadVariable", name, var, &known, &dtype, &shape))
    return invalid_output;
  if (!known) {
    rf__graph_refuse(g, "ReadVariable", name,
                     "input %s is not a Variable node, so its dtype is unknown",
                     rf_node_name(var.node));
    return invalid_output;
  }
  rf_node_builder *b = rf_node_builder_new(g, "ReadVariable", name);
  rf_node_builder_input(b, var);
  rf_node_builder_attr_dtype(b, "dtype", dtype);
  rf_node_builder_attr_shape(b, "shape", shape);
  return rf__finish_output(g, b);
}

rf_node *rf_assign(rf_graph *g, const char *name, rf_output var,
                   rf_output value) {
  rf_output in[2] = {var, value};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Assign", name, in, 2) ||
      !value_fits(g, "Assign", name, "value", var, value))
    return NULL;
  rf_node_builder *b = rf_node_builder_new(g, "Assign", name);
  rf_node_builder_input(b, var);
  rf_node_builder_input(b, value);
  return rf__finish_node(g, b);
}

rf_output rf_assign_mul(rf_graph *g, const char *name, rf_output var,
                        rf_output value) {
  rf_output in[2] = {var, value};
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "AssignMul", name, in, 2) ||
      !value_fits(g, "AssignMul", name, "value", var, value))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "AssignMul", name);
  rf_node_builder_input(b, var);
  rf_node_builder_input(b, value);
  return rf__finish_output(g, b);
}

rf_node *rf_apply_gradient_descent(rf_graph *g, const char *name, rf_output var,
                                   rf_output alpha, rf_output delta) {
  rf_output in[3] = {var, alpha, delta};
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "ApplyGradientDescent", name, in, 3) ||
      !value_fits(g, "ApplyGradientDescent", name, "delta", var, delta))
    return NULL;
  rf_node_builder *b = rf_node_builder_new(g, "ApplyGradientDescent", name);
  for (int i = 0; i < 3; i++) rf_node_builder_input(b, in[i]);
  return rf__finish_node(g, b);
}

rf_node *rf_apply_adam(rf_graph *g, const char *name, rf_output var,
                       rf_output m, rf_output v, rf_output beta1_power,
                       rf_output beta2_power, rf_output lr, rf_output beta1,
                       rf_output beta2, rf_output epsilon, rf_output grad) {
  rf_output in[10] = {var, m,     v,     beta1_power, beta2_power,
                      lr,  beta1, beta2, epsilon,     grad};
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "ApplyAdam", name, in, 10) ||
      !value_fits(g, "ApplyAdam", name, "grad", var, grad) ||
      !value_fits(g, "ApplyAdam", name, "grad", m, grad) ||
      !value_fits(g, "ApplyAdam", name, "grad", v, grad))
    return NULL;
  rf_node_builder *b = rf_node_builder_new(g, "ApplyAdam", name);
  for (int i = 0; i < 10; i++) rf_node_builder_input(b, in[i]);
  return rf__finish_node(g, b);
}

rf_node *rf_apply_adamw(rf_graph *g, const char *name, rf_output var,
                        rf_output m, rf_output v, rf_output beta1_power,
                        rf_output beta2_power, rf_output lr, rf_output beta1,
                        rf_output beta2, rf_output epsilon,
                        rf_output weight_decay, rf_output grad) {
  rf_output in[11] = {var,   m,     v,       beta1_power,  beta2_power, lr,
                      beta1, beta2, epsilon, weight_decay, grad};
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "ApplyAdamW", name, in, 11) ||
      !value_fits(g, "ApplyAdamW", name, "grad", var, grad) ||
      !value_fits(g, "ApplyAdamW", name, "grad", m, grad) ||
      !value_fits(g, "ApplyAdamW", name, "grad", v, grad))
    return NULL;
  rf_node_builder *b = rf_node_builder_new(g, "ApplyAdamW", name);
  for (int i = 0; i < 11; i++) rf_node_builder_input(b, in[i]);
  return rf__finish_node(g, b);
}

rf_node *rf_apply_momentum(rf_graph *g, const char *name, rf_output var,
                           rf_output accum, rf_output lr, rf_output grad,
                           rf_output momentum, bool use_nesterov) {
  rf_output in[5] = {var, accum, lr, grad, momentum};
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "ApplyMomentum", name, in, 5) ||
      !value_fits(g, "ApplyMomentum", name, "grad", var, grad) ||
      !value_fits(g, "ApplyMomentum", name, "grad", accum, grad))
    return NULL;
  rf_node_builder *b = rf_node_builder_new(g, "ApplyMomentum", name);
  for (int i = 0; i < 5; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_bool(b, "use_nesterov", use_nesterov);
  return rf__finish_node(g, b);
}
