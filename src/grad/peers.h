/* grad/peers.h - groups of collective participants (ops flagged
 * RF_OP_GROUPED, grouped by their shared_name attr). Each participant's output
 * depends on every peer's input although no edge says so: the gradient
 * builder follows these groups as if they were edges, and builds every
 * participant's gradient once any is needed (a gradient all-reduce needs all
 * its participants). */
#ifndef RF_GRAD_PEERS_H
#define RF_GRAD_PEERS_H

#include "graph/graph.h"

typedef struct rf__peers rf__peers;

/* Groups the grouped nodes among ids [0, num_ids). Linear in the graph. */
rf_status *rf__peers_build(const rf_graph *g, int num_ids, rf__peers **out);
/* The ids of node id's group (itself included); *count 0 if it has none. */
const int *rf__peers_of(const rf__peers *p, int id, int *count);
void rf__peers_free(rf__peers *p);

#endif
