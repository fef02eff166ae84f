/* graph/graph_bulk.c - edits touching many edges of one node at once. The
 * one-at-a-time edits search and shift a node's edge array per edge up to
 * its nearer end, which is quadratic for many edges from the middle of a
 * node's 100k consumers; these filter each array once. */
#include "core/mem.h"
#include "core/status.h"
#include "graph/graph_internal.h"

rf_status *rf__graph_redirect_edges(rf_graph *g, rf_node *src,
                                    rf__edge *const *edges,
                                    rf_node *const *new_src, const int *new_out,
                                    int n) {
  (void)g;
  /* Reserve room first (bumping counts so repeated targets add up), so a
   * failure changes nothing. */
  int k = 0;
  for (; k < n; k++) {
    rf_node *ns = new_src[k];
    if (rf__node_reserve_edges(ns, true, ns->num_out_edges + 1)) break;
    ns->num_out_edges++;
  }
  for (int j = 0; j < k; j++) new_src[j]->num_out_edges--;
  if (k < n) return rf__oom();
  for (k = 0; k < n; k++) {
    rf__edge *e = edges[k];
    rf_node *ns = new_src[k];
    e->src = ns;
    if (e->src_out != RF_CONTROL_SLOT) e->src_out = new_out[k];
    ns->out_edges[ns->num_out_edges++] = e;
  }
  /* Moved edges no longer name src as their source: drop them in one pass. */
  int kept = 0;
  for (int j = 0; j < src->num_out_edges; j++)
    if (src->out_edges[j]->src == src)
      src->out_edges[kept++] = src->out_edges[j];
  src->num_out_edges = kept;
  return NULL;
}

/* Keeps the edges of arr whose both ends survive. */
static void filter(rf__edge **arr, int *n, const char *remove) {
  int kept = 0;
  for (int j = 0; j < *n; j++)
    if (!remove[arr[j]->src->id] && !remove[arr[j]->dst->id])
      arr[kept++] = arr[j];
  *n = kept;
}

void rf__graph_remove_nodes(rf_graph *g, const char *remove) {
  /* 1. Survivors adjacent to removed nodes drop those edges (once each). */
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *v = g->nodes[i];
    if (!v || !remove[i]) continue;
    for (int k = 0; k < v->num_in_edges + v->num_out_edges; k++) {
      rf__edge *e = k < v->num_in_edges ? v->in_edges[k]
                                        : v->out_edges[k - v->num_in_edges];
      rf_node *w = e->src == v ? e->dst : e->src;
      if (remove[w->id]) continue;
      if (e->dst == w && e->dst_in != RF_CONTROL_SLOT)
        w->data_in[e->dst_in] = NULL;
      /* Filtering twice is harmless; filtering per edge would be costly, so
       * each survivor is filtered when first met (scratch marks it). */
      if (w->scratch == (void *)remove) continue;
      w->scratch = (void *)remove;
      filter(w->in_edges, &w->num_in_edges, remove);
      filter(w->out_edges, &w->num_out_edges, remove);
    }
  }
  /* 2. Free each edge once: every edge touching a removed node is in the
   * in_edges of its dst, or (dst surviving) the out_edges of a removed src.
   * Out-edges go first, in a pass of their own: reading an out-edge's dst
   * after some removed dst's in_edges were freed would touch freed memory. */
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *v = g->nodes[i];
    if (!v || !remove[i]) continue;
    for (int k = 0; k < v->num_out_edges; k++)
      if (!remove[v->out_edges[k]->dst->id]) rf__free(v->out_edges[k]);
  }
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *v = g->nodes[i];
    if (!v || !remove[i]) continue;
    for (int k = 0; k < v->num_in_edges; k++) rf__free(v->in_edges[k]);
  }
  /* 3. The nodes. */
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *v = g->nodes[i];
    if (!v) continue;
    if (!remove[i]) {
      if (v->scratch == (void *)remove) v->scratch = NULL;
      continue;
    }
    rf__name_index_remove(&g->names, v->name, v->id);
    g->nodes[i] = NULL;
    g->num_live--;
    rf__node_free(v);
  }
}
