/* passes/node_merge.h - merging a few nodes into one new node, for the
 * rewrite passes that fuse a pattern (passes/fuse_epilogues.c,
 * passes/fuse_xent_grad.c): the check that the merge makes no cycle, moving
 * the readers of an output, and retiring the merged nodes. */
#ifndef RF_PASSES_NODE_MERGE_H
#define RF_PASSES_NODE_MERGE_H

#include <stdbool.h>

#include "graph/graph.h"

typedef struct rf__merge_ctx {
  rf_graph *g;
  char *member; /* per node id: 1 while it is in the group being checked */
  int *seen;    /* visit stamps */
  int *stack;
  int stamp;
} rf__merge_ctx;

/* Scratch for g's node ids as they are now (nodes added later get ids past
 * them and must not be asked about). NULL or RESOURCE_EXHAUSTED. */
rf_status *rf__merge_ctx_init(rf__merge_ctx *c, rf_graph *g);
void rf__merge_ctx_free(rf__merge_ctx *c);

/* Whether m[0, nm) may become one node: no path leaves a member and comes
 * back to a member through a node that is none (merging would make it a
 * cycle). */
bool rf__merge_ok(rf__merge_ctx *c, rf_node *const *m, int nm);

/* Points every data edge leaving output `out` of `from` at (to, to_out). */
rf_status *rf__merge_redirect(rf_graph *g, rf_node *from, int out, rf_node *to,
                              int to_out);

/* Moves the members' control edges with non-members onto `to`, then
 * removes the members (their data edges must have been redirected or be
 * internal to the group). */
rf_status *rf__merge_retire(rf__merge_ctx *c, rf_node *const *m, int nm,
                            rf_node *to);

/* A node of `op_name` on like's assigned device (named `device`), inputs
 * in[0, nin) and `attrs` (copied), named "<like's name>/<op_name>" made
 * unique in g: the node that replaces a group led by `like`. */
rf_status *rf__merge_add_node(rf_graph *g, const rf_node *like,
                              const char *device, const char *op_name,
                              const rf_output *in, int nin,
                              const rf__attrs *attrs, rf_node **out);

/* The only data edge leaving output `out` of n, or NULL (none, or several). */
rf__edge *rf__merge_only_reader(const rf_node *n, int out);

#endif
