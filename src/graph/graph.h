/* graph/graph.h - the graph's internal representation, shared by the graph
 * builder, the op registry, gradients, passes and the runtime.
 *
 * Invariants: nodes[i]->id == i for live nodes (removed ones leave NULL);
 * node names are unique; every edge is in exactly one node's out_edges and one
 * node's in_edges; data_in[k] is the edge feeding data input k. */
#ifndef RF_GRAPH_GRAPH_H
#define RF_GRAPH_GRAPH_H

#include <stdbool.h>

#include "core/hash.h"
#include "core/status.h"
#include "graph/attrs.h"
#include "graph/device_name.h"
#include "graph/name_index.h"
#include "ringflow/graph.h"

struct rf__op_def;

#define RF_CONTROL_SLOT (-1)

typedef struct rf__edge {
  rf_node *src;
  int src_out; /* RF_CONTROL_SLOT for a control edge */
  rf_node *dst;
  int dst_in; /* RF_CONTROL_SLOT for a control edge */
} rf__edge;

struct rf_node {
  int id;
  char *name;
  const struct rf__op_def *op;
  char *requested_device; /* canonical ("cpu:1") or "" */
  int assigned_device;    /* session device index after placement; -1 before */
  int num_inputs;         /* data inputs, variadic lists flattened */
  rf__edge **data_in;     /* [num_inputs] */
  int *arg_start; /* [op->num_inputs + 1]: flattened index of each arg */
  /* Edge lists, in the order the edges were linked (removals keep the order
   * of the rest). Read them freely; change them only through src/graph:
   * in_edges[0, num_in_edges) starts skip_in_edges slots into its
   * allocation of cap_in_edges slots, as a removal near the front moves the
   * edges before it up one slot instead of the ones after it down (so
   * removing a node's consumers in order is linear, not quadratic). */
  rf__edge **in_edges; /* data and control */
  int num_in_edges, cap_in_edges, skip_in_edges;
  rf__edge **out_edges;
  int num_out_edges, cap_out_edges, skip_out_edges;
  int num_outputs;
  rf_dtype *out_dtypes; /* [num_outputs] */
  rf_shape *out_shapes; /* [num_outputs] */
  rf__attrs attrs;
  void *scratch; /* for the pass or compile stage holding the node */
};

#define RF_MAX_DEVICE_SCOPE 32

struct rf_graph {
  rf_node **nodes; /* by id; NULL where removed */
  int num_ids, cap_ids;
  int num_live;
  rf__name_index names; /* id by name (graph/name_index.h) */
  char device_scope[RF_MAX_DEVICE_SCOPE][RF_DEVICE_NAME_MAX];
  int device_depth;
  rf_status *error; /* first error from an op function (sticky) */
  int64_t name_counter;
  /* Next suffix to try per generated-name base (uthash; a hint only: names
   * are always checked against names). */
  struct rf__name_count *name_counts;
};

/* ---- structure edits (used by the builder, gradients and passes) ---- */

/* Makes a node of `op` from resolved parts, without checks or shape inference
 * (passes use this for internal nodes; users go through rf_node_builder).
 * name NULL: generated. Takes a copy of attrs. */
rf_status *rf__graph_add_node(rf_graph *g, const struct rf__op_def *op,
                              const char *name, const char *device,
                              const rf_output *inputs, int num_inputs,
                              const rf__attrs *attrs, rf_node **out);
/* Adds an edge (control when src_out == dst_in == RF_CONTROL_SLOT). For a data
 * edge the slot dst_in must be free. */
rf_status *rf__graph_add_edge(rf_graph *g, rf_node *src, int src_out,
                              rf_node *dst, int dst_in);
/* Removes one edge and frees it. Each edge list keeps the order of the
 * others; the cost is the smaller of the edge's distances from the two ends
 * of each list (constant for the first or last edge). */
void rf__graph_remove_edge(rf_graph *g, rf__edge *e);
/* Points data input dst_in of dst at (src, src_out) instead. */
rf_status *rf__graph_update_edge(rf_graph *g, rf_node *dst, int dst_in,
                                 rf_node *src, int src_out);
/* Removes a node with all its edges; each costs as in
 * rf__graph_remove_edge in its other end's list (removing a node's
 * consumers first to last, or last to first, is linear in all). */
void rf__graph_remove_node(rf_graph *g, rf_node *n);
/* Deep copy; node ids are kept, so nodes map by id. */
rf_status *rf__graph_copy(const rf_graph *g, rf_graph **out);
/* A name not yet used in g, from base ("MatMul" -> "MatMul_3"), into buf. */
void rf__graph_unique_name(rf_graph *g, const char *base, char *buf,
                           size_t len);
/* True when a control edge src -> dst exists already. */
bool rf__graph_has_control_edge(const rf_node *src, const rf_node *dst);

/* ---- bulk edits, linear where one-at-a-time edits would be quadratic
 * (graph_bulk.c; used by the compile stages on large fan-outs) ---- */

/* Moves the source end of edges[k] (all leaving `src`) to (new_src[k],
 * new_out[k]); control edges stay control edges (new_out ignored). No
 * new_src[k] may be src. Time O(n + src's out edges). On error (no memory)
 * the graph is unchanged. */
rf_status *rf__graph_redirect_edges(rf_graph *g, rf_node *src,
                                    rf__edge *const *edges,
                                    rf_node *const *new_src, const int *new_out,
                                    int n);
/* Removes every node n with remove[n->id] != 0, with all its edges, in time
 * linear in the edges touching removed nodes and the edge lists of their
 * surviving neighbours. Surviving consumers may be left with unfed inputs.
 * Uses the scratch field of surviving neighbours (left NULL). */
void rf__graph_remove_nodes(rf_graph *g, const char *remove);

/* ---- sticky errors for the op functions ---- */

/* True (and nothing to do) when g already holds an error or is NULL. */
bool rf__graph_failed(const rf_graph *g);
/* Keeps st as g's error if it has none yet, else frees st. */
void rf__graph_record(rf_graph *g, rf_status *st);
/* Records INVALID_ARGUMENT for a node refused before it was built: the
 * message starts "node 'NAME' (OP)" - NAME cut at 200 bytes; with no name
 * given "a new OP node" - and " on DEVICE" inside a device scope. */
void rf__graph_refuse(rf_graph *g, const char *op, const char *name,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for an error st made elsewhere (consumed; its code and whole
 * message kept under the prefix). */
void rf__graph_refuse_status(rf_graph *g, const char *op, const char *name,
                             rf_status *st);
/* Checks each input is valid; records an INVALID_ARGUMENT naming the node
 * (name: as the caller's op function got it, NULL: none) and op otherwise. */
bool rf__graph_inputs_ok(rf_graph *g, const char *op, const char *name,
                         const rf_output *in, int n);
/* Finishes b; on error records it in g and returns the invalid output. */
rf_output rf__finish_output(rf_graph *g, rf_node_builder *b);
rf_node *rf__finish_node(rf_graph *g, rf_node_builder *b);

/* Sets any attribute value (copied) on a builder: the generic form of the
 * rf_node_builder_attr_* setters, for loaders. */
void rf__node_builder_attr_value(rf_node_builder *b, const char *name,
                                 const rf__attr_value *v);
/* Lets b's shared_name hold RF_RESERVED_NAME_CHAR: for the gradient
 * builder, which makes those names, and loaders of saved graphs. */
void rf__node_builder_allow_reserved(rf_node_builder *b);

/* The device the current scope requests ("" for none). */
const char *rf__graph_scope_device(const rf_graph *g);

/* Input k's source (data edge), convenience. */
static inline rf_output rf__input(const rf_node *n, int k) {
  rf_output o = {n->data_in[k]->src, n->data_in[k]->src_out};
  return o;
}

#endif
