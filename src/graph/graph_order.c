/* graph/graph_order.c - Kahn's algorithm over live nodes. The ready set is a
 * FIFO seeded in id order, so the result depends only on the graph. */
#include "graph/graph_order.h"

rf_status *rf__graph_topological_order(const rf_graph *g, int **order,
                                       int *count) {
  int n = g->num_ids;
  int *pending = rf__calloc((size_t)n + 1, sizeof *pending);
  int *out = rf__malloc(((size_t)n + 1) * sizeof *out);
  if (!pending || !out) {
    rf__free(pending);
    rf__free(out);
    return rf__oom();
  }
  int head = 0, tail = 0, live = 0;
  for (int id = 0; id < n; id++) {
    const rf_node *node = g->nodes[id];
    if (!node) continue;
    live++;
    pending[id] = node->num_in_edges;
    if (pending[id] == 0) out[tail++] = id;
  }
  while (head < tail) {
    const rf_node *node = g->nodes[out[head++]];
    for (int i = 0; i < node->num_out_edges; i++) {
      int d = node->out_edges[i]->dst->id;
      if (--pending[d] == 0) out[tail++] = d;
    }
  }
  if (tail != live) {
    const char *name = "?";
    for (int id = 0; id < n; id++)
      if (g->nodes[id] && pending[id] > 0) {
        name = g->nodes[id]->name;
        break;
      }
    rf__free(pending);
    rf__free(out);
    return rf__invalid("the graph has a cycle through node '%s'", name);
  }
  rf__free(pending);
  *order = out;
  *count = tail;
  return NULL;
}
