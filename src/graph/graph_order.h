/* graph/graph_order.h - a topological order of a graph's live nodes over data
 * and control edges (Kahn's algorithm: linear; ties by node id, so the order
 * is deterministic). */
#ifndef RF_GRAPH_GRAPH_ORDER_H
#define RF_GRAPH_GRAPH_ORDER_H

#include "graph/graph.h"

/* *order (rf__malloc'ed, caller frees with rf__free) gets *count node ids.
 * INVALID_ARGUMENT naming a node on a cycle if there is one. */
rf_status *rf__graph_topological_order(const rf_graph *g, int **order,
                                       int *count);

#endif
