/* ringflow/graph.h - dataflow graphs: nodes, data and control edges, typed
 * attributes, requested devices.
 *
 * Two ways to add a node:
 *  - rf_node_builder: a status for every node (for code that must handle each);
 *  - the op functions of ringflow/ops.h: they return an rf_output and keep the
 *    graph's FIRST error, readable with rf_graph_status; once the graph holds
 * an error they add nothing and return an invalid output (TF's Scope::status).
 *
 *   rf_graph *g = rf_graph_new();
 *   rf_graph_push_device(g, "cpu:1");
 *   rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 4, 3));
 *   rf_output y = rf_relu(g, NULL, x);
 *   rf_graph_pop_device(g);
 *   rf_status *st = rf_graph_status(g);   // NULL: every node was added
 */
#ifndef RINGFLOW_GRAPH_H
#define RINGFLOW_GRAPH_H

#include "ringflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_graph rf_graph;
typedef struct rf_node rf_node;

/* One output of a node. node == NULL is the invalid output. */
typedef struct rf_output {
  rf_node *node;
  int index;
} rf_output;

/* A new empty graph, or NULL when memory runs out. */
RF_API rf_graph *rf_graph_new(void);
/* Frees the graph and every node; NULL is ignored. Sessions built from the
 * graph keep their own copy, so they stay valid. */
RF_API void rf_graph_free(rf_graph *g);

/* The first error recorded by an op function, as a new status the caller owns;
 * NULL if none. INVALID_ARGUMENT for a NULL graph. A call the op function
 * refuses adds no node, and its message names the node it would have made
 * and the op: "node 'NAME' (OP)", NAME as given or generated (quoted up to
 * 200 bytes), or "a new OP node" when it was refused before a name was
 * chosen; such early refusals also name the device scope (" on DEVICE",
 * rf_graph_push_device). */
RF_API rf_status *rf_graph_status(const rf_graph *g);
/* Forgets the recorded error so building can go on. */
RF_API void rf_graph_clear_status(rf_graph *g);

/* Device scope: nodes added while a device is pushed request that device unless
 * they name one. The name is parsed and validated ("cpu:0", "gpu:3", "cpu" for
 * cpu:0; "" pushes "no device"). INVALID_ARGUMENT for a malformed name and
 * for a scope nested more than 32 deep; the scope is unchanged on error.
 * Where a node that requests no device runs (placement, when a session
 * compiles): a reader or updater of a variable (first input of dtype
 * resource) where the variable is; else on the device of its first data
 * input that has a device of its own (requested, or taken from a variable
 * or an input this way), else of its first data input; else (no inputs) on
 * the session's default_device. A node that got its device only from the
 * default has none of its own; last, such a Const whose data consumers all
 * run on one device moves there. So with x on cpu:1, both x * 2 and 2 * x
 * (a Const with no device first) run on cpu:1 with their Const. */
RF_API rf_status *rf_graph_push_device(rf_graph *g, const char *device);
/* Pops the innermost scope; does nothing when none is pushed. */
RF_API void rf_graph_pop_device(rf_graph *g);

RF_API int rf_graph_num_nodes(const rf_graph *g);
/* The node named `name`, or NULL. */
RF_API rf_node *rf_graph_find_node(const rf_graph *g, const char *name);
/* The i-th live node in insertion order, or NULL. */
RF_API rf_node *rf_graph_node(const rf_graph *g, int i);

RF_API const char *rf_node_name(const rf_node *n);
RF_API const char *rf_node_op(const rf_node *n);
/* The requested device in canonical form ("cpu:1"), "" if none. */
RF_API const char *rf_node_device(const rf_node *n);
RF_API int rf_node_num_inputs(const rf_node *n);
RF_API int rf_node_num_outputs(const rf_node *n);
/* The i-th data input's source; invalid output when out of range. */
RF_API rf_output rf_node_input(const rf_node *n, int i);
RF_API int rf_node_num_control_inputs(const rf_node *n);
RF_API rf_node *rf_node_control_input(const rf_node *n, int i);
RF_API rf_dtype rf_output_dtype(rf_output o);
/* The shape inferred when the node was built (may be partly unknown). */
RF_API rf_shape rf_output_shape(rf_output o);
/* Sets the requested device of an existing node, parsed as for
 * rf_graph_push_device ("" clears it). INVALID_ARGUMENT naming the node and
 * op for a malformed name; the node is unchanged on error. */
RF_API rf_status *rf_node_set_device(rf_node *n, const char *device);
/* Adds a control edge src -> dst (dst runs after src); one already there is
 * not added again. INVALID_ARGUMENT for a NULL argument, a node of another
 * graph, or an edge that would close a cycle (src == dst included). */
RF_API rf_status *rf_graph_add_control_edge(rf_graph *g, rf_node *src,
                                            rf_node *dst);

/* Attribute reads; NOT_FOUND if absent, INVALID_ARGUMENT if of another type. */
RF_API rf_status *rf_node_attr_int(const rf_node *n, const char *name,
                                   int64_t *out);
RF_API rf_status *rf_node_attr_float(const rf_node *n, const char *name,
                                     double *out);
RF_API rf_status *rf_node_attr_bool(const rf_node *n, const char *name,
                                    bool *out);
/* *out is owned by the node. */
RF_API rf_status *rf_node_attr_string(const rf_node *n, const char *name,
                                      const char **out);
RF_API rf_status *rf_node_attr_dtype(const rf_node *n, const char *name,
                                     rf_dtype *out);
RF_API rf_status *rf_node_attr_shape(const rf_node *n, const char *name,
                                     rf_shape *out);

/* ---- Node builder: TF_OperationDescription's role. ---- */
typedef struct rf_node_builder rf_node_builder;

/* Starts a node of op `op`. name NULL: a unique name is generated from the op
 * ("MatMul", then "MatMul_1", ...). A name given is of any length, of letters,
 * digits, '_' and '.', and after its first character also '/' and '-'.
 * Never returns NULL: errors (NULL graph, unknown op, no memory) are reported
 * by rf_node_builder_finish. */
RF_API rf_node_builder *rf_node_builder_new(rf_graph *g, const char *op,
                                            const char *name);
/* One argument: an output (node and index, checked by finish). For a
 * variadic argument it is a list of one; a graph file writes even that as a
 * list (docs/GRAPH_FORMAT.md, "Inputs"). */
RF_API void rf_node_builder_input(rf_node_builder *b, rf_output input);
/* A variadic input (`N * T`): all `n` outputs form one argument. A list for
 * an argument that is not variadic is refused by finish. finish also
 * reports INVALID_ARGUMENT for n < 0, NULL inputs with n > 0, or a count
 * that takes the node's inputs past INT_MAX, and RESOURCE_EXHAUSTED when
 * memory for the list cannot be had. */
RF_API void rf_node_builder_input_list(rf_node_builder *b,
                                       const rf_output *inputs, int n);
RF_API void rf_node_builder_control_input(rf_node_builder *b, rf_node *src);
RF_API void rf_node_builder_device(rf_node_builder *b, const char *device);
RF_API void rf_node_builder_attr_int(rf_node_builder *b, const char *name,
                                     int64_t v);
RF_API void rf_node_builder_attr_float(rf_node_builder *b, const char *name,
                                       double v);
RF_API void rf_node_builder_attr_bool(rf_node_builder *b, const char *name,
                                      bool v);
RF_API void rf_node_builder_attr_string(rf_node_builder *b, const char *name,
                                        const char *v);
RF_API void rf_node_builder_attr_dtype(rf_node_builder *b, const char *name,
                                       rf_dtype v);
RF_API void rf_node_builder_attr_shape(rf_node_builder *b, const char *name,
                                       rf_shape v);
/* The tensor is retained. A tensor in device memory
 * (rf_tensor_new_external_gpu) is refused: finish reports INVALID_ARGUMENT. */
RF_API void rf_node_builder_attr_tensor(rf_node_builder *b, const char *name,
                                        rf_tensor *v);
RF_API void rf_node_builder_attr_int_list(rf_node_builder *b, const char *name,
                                          const int64_t *v, int n);
RF_API void rf_node_builder_attr_float_list(rf_node_builder *b,
                                            const char *name, const double *v,
                                            int n);

/* Checks arity, dtypes, attributes (defaults filled in) and shapes against the
 * op's registration, then adds the node. Consumes the builder whatever
 * happens. On error nothing is added, *out is untouched and the message names
 * the node and op. Codes: NOT_FOUND for an op that is not registered ("Op
 * type not registered 'X'"); ALREADY_EXISTS for a name already used in the
 * graph; INVALID_ARGUMENT for the rest (a NULL graph, a name that is not
 * valid, wrong arity, dtypes, attr types or values, a missing required attr,
 * shapes, a device name that does not parse); RESOURCE_EXHAUSTED without
 * memory. */
RF_API rf_status *rf_node_builder_finish(rf_node_builder *b, rf_node **out);

#ifdef __cplusplus
}
#endif
#endif
