/* passes/topo.c - topological order by Kahn's algorithm over flat arrays
 * indexed by node id: linear in nodes plus edges. Ties go in id order, so the
 * order (and everything placed from it) is deterministic. */
#include "ops/op_registry.h"
#include "passes/pass_registry.h"

rf_status *rf__topological_order(const rf_graph *g, rf_node ***order, int *n) {
  int ids = g->num_ids;
  int *indeg = rf__calloc((size_t)(ids ? ids : 1), sizeof(int));
  rf_node **out = rf__malloc(sizeof(rf_node *) * (size_t)(ids ? ids : 1));
  if (!indeg || !out) {
    rf__free(indeg);
    rf__free(out);
    return rf__oom();
  }
  /* out doubles as the FIFO queue: [head, tail) are ready, unprocessed. */
  int tail = 0;
  for (int i = 0; i < ids; i++) {
    rf_node *v = g->nodes[i];
    if (!v) continue;
    indeg[i] = v->num_in_edges;
    if (indeg[i] == 0) out[tail++] = v;
  }
  for (int head = 0; head < tail; head++) {
    rf_node *v = out[head];
    for (int k = 0; k < v->num_out_edges; k++) {
      rf_node *d = v->out_edges[k]->dst;
      if (--indeg[d->id] == 0) out[tail++] = d;
    }
  }
  if (tail < g->num_live) {
    const rf_node *bad = NULL;
    for (int i = 0; i < ids && !bad; i++)
      if (g->nodes[i] && indeg[i] > 0) bad = g->nodes[i];
    rf__free(indeg);
    rf__free(out);
    return rf__invalid("the graph has a cycle through node '%s' (%s)",
                       bad ? bad->name : "?", bad ? bad->op->name : "?");
  }
  rf__free(indeg);
  *order = out;
  *n = tail;
  return NULL;
}
