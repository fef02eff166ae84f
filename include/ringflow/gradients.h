/* ringflow/gradients.h - reverse-mode gradients as more graph nodes.
 *
 * Gradient nodes are placed on the devices their forward ops request. Several
 * contributions to one tensor are summed with AddN, except for ops whose
 * gradient wants the contributions un-summed (Broadcast). Gradient nodes are
 * ordinary nodes with gradients of their own, so rf_gradients can be applied
 * to its own results (second order; tests/test_gradient_values.c checks an
 * MLP's). */
#ifndef RINGFLOW_GRADIENTS_H
#define RINGFLOW_GRADIENTS_H

#include "ringflow/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adds nodes computing d(sum of ys)/d(xs[i]) into dxs[i]. grad_ys (NULL: ones
 * of each y's shape) weights each y. dxs[i] is the invalid output {NULL, 0}
 * when no y depends on xs[i]; a variable's handle (dtype resource:
 * rf_variable's output) carries no gradient, so it gets the invalid output even
 * when a y reads the variable: differentiate with respect to the read
 * (rf_read_variable's output) instead. bool tensors carry no gradient: a bool y
 * seeds none and no gradient flows into a bool tensor (a bool x's dx is
 * invalid). On error the nodes already added stay in g (unused), dxs is
 * untouched, g records no error (rf_graph_status stays NULL, so sessions
 * can still be made from it), and the message names the op that has no
 * gradient. Errors: RF_NOT_FOUND "No gradient defined for op 'X' (node 'N')"
 * for an op with no gradient function (MaxPoolGrad, _LayerNormGrad, ...);
 * RF_INVALID_ARGUMENT for a gradient its op refuses for the node's dtype or
 * attributes ("No gradient defined for AllReduce of int32", a reduction
 * other than sum) and for a grad_y of the wrong dtype or shape. A graph that
 * already holds an error (rf_graph_status) gets a copy of it back, and
 * nothing is added. The caller's device scope (rf_graph_push_device, at
 * any depth) does not affect the gradient nodes and is the same afterwards. */
RF_API rf_status *rf_gradients(rf_graph *g, const rf_output *ys, int ny,
                               const rf_output *xs, int nx,
                               const rf_output *grad_ys, rf_output *dxs);

#ifdef __cplusplus
}
#endif
#endif
