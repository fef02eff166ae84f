/* graph/graph_internal.h - helpers shared by the files of src/graph that build
 * nodes: allocation of an unlinked node, linking it into a graph
 * all-or-nothing, and resolving an op's signature (type and number attrs,
 * output dtypes). */
#ifndef RF_GRAPH_GRAPH_INTERNAL_H
#define RF_GRAPH_GRAPH_INTERNAL_H

#include "graph/graph.h"
#include "ops/op_registry.h"

/* A node not yet in any graph: name, device, arg layout (arg_sizes per op
 * input arg), attrs (moved in: *attrs is emptied) and output dtypes (moved in:
 * *out_dtypes is set to NULL). Output shapes start unknown. On error nothing
 * is taken. */
rf_status *rf__node_alloc(const rf__op_def *op, const char *name,
                          const char *device, const int *arg_sizes,
                          int num_inputs, rf__attrs *attrs, int num_outputs,
                          rf_dtype **out_dtypes, rf_node **out);
/* Frees a node and its arrays (not the edges themselves). */
void rf__node_free(rf_node *n);
/* Makes room for need edges in n's out-edge list (out) or in-edge list; the
 * edges there stay, in order (the array may move). -1 when out of memory,
 * with nothing changed. */
int rf__node_reserve_edges(rf_node *n, bool out, int need);
/* Takes e out of n's out-edge list (out) or in-edge list, keeping the order
 * of the rest; nothing when e is not there. Cost: the smaller of e's
 * distances from the two ends of the list. */
void rf__node_unlink_edge(rf_node *n, bool out, const rf__edge *e);
/* Adds n to g with data inputs (n->num_inputs of them) and control inputs;
 * duplicate control sources are dropped. On error g and n are unchanged. */
rf_status *rf__graph_insert(rf_graph *g, rf_node *n, const rf_output *inputs,
                            rf_node *const *controls, int num_controls);
/* True when n is a live node of g. */
bool rf__graph_owns(const rf_graph *g, const rf_node *n);
/* "" for NULL; for messages. */
const char *rf__node_op_name(const rf_node *n);

/* Infers missing type and number attrs from the inputs, fills defaults and
 * computes the output dtypes (*out_dtypes: new array, *num_outputs). strict:
 * every check of the op's registration (dtype agreement, allowed sets,
 * minimums, unknown and missing attrs) is an INVALID_ARGUMENT naming node and
 * op; not strict: only what the outputs cannot do without (dtypes that cannot
 * be resolved become RF_DTYPE_INVALID). */
rf_status *rf__resolve_signature(const rf__op_def *op, const char *node_name,
                                 rf__attrs *attrs, const rf_dtype *in_dtypes,
                                 const int *arg_sizes, bool strict,
                                 int *num_outputs, rf_dtype **out_dtypes);
/* Per-arg input counts for num_inputs flattened inputs, from the number attrs
 * in attrs (one variadic arg without its attr takes the rest). */
rf_status *rf__infer_arg_sizes(const rf__op_def *op, const char *node_name,
                               const rf__attrs *attrs, int num_inputs,
                               int *arg_sizes);
/* Runs op's shape function for n (inputs given explicitly, as edges are not
 * attached yet); fills n->out_shapes. */
rf_status *rf__run_shape_fn(rf_node *n, const rf_output *inputs);

#endif
