/* passes/prune.c - keeps only what a step needs: the nodes from which a fetch
 * or target is reachable backwards over data and control edges. One breadth-
 * first walk over arrays indexed by node id: linear in nodes plus edges. */
#include "passes/lower_collectives.h"
#include "passes/pass_registry.h"

rf_status *rf__prune(rf_graph *g, const char *keep) {
  int ids = g->num_ids;
  char *seen = rf__calloc((size_t)(ids ? ids : 1), 1);
  rf_node **queue = rf__malloc(sizeof(rf_node *) * (size_t)(ids ? ids : 1));
  if (!seen || !queue) {
    rf__free(seen);
    rf__free(queue);
    return rf__oom();
  }
  int tail = 0;
  for (int i = 0; i < ids; i++) {
    if (g->nodes[i] && keep[i]) {
      seen[i] = 1;
      queue[tail++] = g->nodes[i];
    }
  }
  /* Walk back from the roots; then pull in the peers of every collective
   * reached (a participant alone would wait for them) and walk on. Rounds
   * repeat only for collectives that feed other collectives. */
  for (int head = 0;;) {
    for (; head < tail; head++) {
      rf_node *v = queue[head];
      for (int k = 0; k < v->num_in_edges; k++) {
        rf_node *s = v->in_edges[k]->src;
        if (!seen[s->id]) {
          seen[s->id] = 1;
          queue[tail++] = s;
        }
      }
    }
    bool added;
    rf_status *st = rf__collective_mark_peers(g, seen, &added);
    if (st || !added) {
      if (st) {
        rf__free(seen);
        rf__free(queue);
        return st;
      }
      break;
    }
    for (int i = 0; i < ids; i++)
      if (seen[i] == 2) {
        seen[i] = 1;
        queue[tail++] = g->nodes[i];
      }
  }
  for (int i = 0; i < ids; i++) seen[i] = !seen[i]; /* now: remove */
  rf__graph_remove_nodes(g, seen);
  rf__free(seen);
  rf__free(queue);
  return NULL;
}
