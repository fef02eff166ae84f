/* ops/batch_norm_layer.c - batch normalization as a layer: the moving mean
 * and variance are variables, read in inference mode and, in training mode,
 * updated by assign nodes made here (Keras's BatchNormalization):
 *   moving = momentum * moving + (1 - momentum) * batch_statistic.
 * The update is a target the user runs with the training step; nothing runs
 * it implicitly. */
#include <stdio.h>
#include <string.h>

#include "core/shape.h"
#include "graph/graph.h"
#include "ops/batch_norm_layer.h"
#include "ringflow/ops.h"

static bool valid(rf_output o) { return o.node != NULL; }

rf_node *rf_moving_average_update(rf_graph *g, const char *name,
                                  rf_output variable, rf_output value,
                                  double momentum) {
  if (rf__graph_failed(g)) return NULL;
  rf_output in[2] = {variable, value};
  if (!rf__graph_inputs_ok(g, "rf_moving_average_update", name, in, 2))
    return NULL;
  if (!(momentum >= 0 && momentum <= 1)) {
    rf__graph_record(g, rf__invalid("rf_moving_average_update%s%s%s: momentum "
                                    "%g must be in [0, 1]",
                                    RF__BN_NAME(name), momentum));
    return NULL;
  }
  rf_dtype dt = rf_output_dtype(value), vdt = dt;
  rf_shape vs = rf_output_shape(value), vars = vs;
  /* The variable's dtype and shape, where it comes straight from a
   * Variable: checked here so that the message names this update, not an
   * inner Mul or Assign, and nothing is added. */
  if (strcmp(rf_node_op(variable.node), "Variable") == 0) {
    rf_status *ast = rf_node_attr_dtype(variable.node, "dtype", &vdt);
    if (!ast) ast = rf_node_attr_shape(variable.node, "shape", &vars);
    if (ast) {
      rf__graph_record(g, ast);
      return NULL;
    }
  }
  if (!rf_dtype_is_float(dt) || vdt != dt) {
    rf__graph_record(
        g, rf__invalid("rf_moving_average_update%s%s%s: value is %s, the "
                       "variable '%s' %s (both must be one float dtype)",
                       RF__BN_NAME(name), rf_dtype_name(dt),
                       rf_node_name(variable.node), rf_dtype_name(vdt)));
    return NULL;
  }
  if (!rf__shape_compatible(&vs, &vars)) {
    char a[96], b[96];
    rf_shape_format(&vs, a, sizeof a);
    rf_shape_format(&vars, b, sizeof b);
    rf__graph_record(
        g, rf__invalid("rf_moving_average_update%s%s%s: value has shape %s "
                       "but the variable '%s' has shape %s",
                       RF__BN_NAME(name), a, rf_node_name(variable.node), b));
    return NULL;
  }
  /* on the variable's device, where the variable lives */
  rf_status *st = rf_graph_push_device(g, rf_node_device(variable.node));
  if (st) {
    rf__graph_record(g, st);
    return NULL;
  }
  rf_output old = rf_read_variable(g, NULL, variable);
  rf_output keep = rf_mul(g, NULL, old, rf_const_scalar(g, NULL, dt, momentum));
  rf_output add =
      rf_mul(g, NULL, value, rf_const_scalar(g, NULL, dt, 1 - momentum));
  rf_node *a = rf_assign(g, name, variable, rf_add(g, NULL, keep, add));
  rf_graph_pop_device(g);
  return a;
}

/* A NoOp running after both updates, on the first one's device (the
 * moving variables', so a replica's update stays on its device); NULL
 * (recorded) on error. */
static rf_node *group(rf_graph *g, rf_node *a, rf_node *b) {
  if (!a || !b) return NULL;
  rf_status *st = rf_graph_push_device(g, rf_node_device(a));
  if (st) {
    rf__graph_record(g, st);
    return NULL;
  }
  rf_node *n = rf_noop(g, NULL);
  rf_graph_pop_device(g);
  if (!n) return NULL;
  st = rf_graph_add_control_edge(g, a, n);
  if (!st) st = rf_graph_add_control_edge(g, b, n);
  if (st) {
    rf__graph_record(g, st);
    return NULL;
  }
  return n;
}

rf_node *rf__batch_norm_updates(rf_graph *g, rf_output moving_mean,
                                rf_output moving_variance, rf_output mean,
                                rf_output variance, double momentum) {
  rf_node *a = rf_moving_average_update(g, NULL, moving_mean, mean, momentum);
  rf_node *b =
      rf_moving_average_update(g, NULL, moving_variance, variance, momentum);
  return group(g, a, b);
}

void rf_batch_norm(rf_graph *g, const char *name, rf_output x, rf_output gamma,
                   rf_output beta, rf_output moving_mean,
                   rf_output moving_variance, bool training, double momentum,
                   double epsilon, rf_batch_norm_result *out) {
  if (!out) {
    rf__graph_record(g, rf__invalid("rf_batch_norm: NULL result"));
    return;
  }
  *out = (rf_batch_norm_result){{NULL, 0}, {NULL, 0}, {NULL, 0}, NULL};
  if (rf__graph_failed(g)) return;
  if (valid(moving_mean) != valid(moving_variance) ||
      (!training && !valid(moving_mean))) {
    rf__graph_record(
        g, rf__invalid("rf_batch_norm%s%s%s: %s", RF__BN_NAME(name),
                       training ? "give both moving_mean and moving_variance "
                                  "or neither"
                                : "inference needs moving_mean and "
                                  "moving_variance"));
    return;
  }
  if (!(momentum >= 0 && momentum <= 1)) {
    rf__graph_record(g, rf__invalid("rf_batch_norm%s%s%s: momentum %g must be "
                                    "in [0, 1]",
                                    RF__BN_NAME(name), momentum));
    return;
  }
  rf_batch_norm_result r = {{NULL, 0}, {NULL, 0}, {NULL, 0}, NULL};
  if (training) {
    r.y = rf_batch_norm_training(g, name, x, gamma, beta, epsilon, &r.mean,
                                 &r.variance);
    if (!valid(r.y)) return;
    if (valid(moving_mean)) {
      r.update = rf__batch_norm_updates(g, moving_mean, moving_variance, r.mean,
                                        r.variance, momentum);
      if (!r.update) return;
    }
  } else {
    r.mean = rf_read_variable(g, NULL, moving_mean);
    r.variance = rf_read_variable(g, NULL, moving_variance);
    r.y = rf_batch_norm_inference(g, name, x, gamma, beta, r.mean, r.variance,
                                  epsilon);
    if (!valid(r.y)) return;
  }
  *out = r;
}
