/* ops/collective_names.h - the shared names of the collectives rf_gradients
 * makes. Each call is a construction numbered k: one more than the largest k
 * already in the graph's shared names (1 for the first). It names the
 * gradient of collective X "X#grad<k>" and that gradient's helpers
 * "X#grad<k>#<what>". Users never give a name holding '#'
 * (RF_RESERVED_NAME_CHAR: the builders refuse it), so these never meet a
 * user's collective; no two constructions share a k, so they never meet each
 * other; and k depends on the graph alone, so every process building the
 * same graph in the same order derives the same names. */
#ifndef RF_OPS_COLLECTIVE_NAMES_H
#define RF_OPS_COLLECTIVE_NAMES_H

#include <stdint.h>

#include "graph/graph.h"

/* "<shared>#grad<k>" or, with what, "<shared>#grad<k>#<what>"; rf__malloc'ed
 * (any length: a cut name could meet another group), NULL without memory. */
char *rf__grad_shared_name(const char *shared, int64_t k, const char *what);

/* The number for the next construction in g: 1 + the largest k of any
 * "#grad<k>" in a shared_name of g. Linear in the nodes and their names. */
int64_t rf__grad_next_construction(const rf_graph *g);

#endif
