/* graph/name_index.h - a graph's nodes by name: open addressing (linear
 * probing) over node ids, each slot holding the name's hash and the id, at
 * most half full.
 *
 * Slots hold ids, not pointers, and a copy of a graph keeps every node's id,
 * so rf__graph_copy copies the index with one memcpy. Re-inserting each name
 * into a growing hash table (uthash: rehashing at every doubling, a few cache
 * misses a name) was the step of a compile whose cost per node grew with the
 * graph: ~300 ns a node at 100k nodes, ~550 at 1M (docs/PERFORMANCE.md). */
#ifndef RF_GRAPH_NAME_INDEX_H
#define RF_GRAPH_NAME_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "ringflow/graph.h"

typedef struct rf__name_slot {
  uint32_t hash;
  int32_t id; /* -1: empty */
} rf__name_slot;

typedef struct rf__name_index {
  rf__name_slot *slots; /* [mask + 1], NULL while empty */
  uint32_t mask;
  int count;
} rf__name_index;

/* The hash of s[0..len) the index uses. */
uint32_t rf__name_hash(const char *s, size_t len);

/* The id of the node named s[0..len) (nodes[id]->name), or -1. */
int rf__name_index_find(const rf__name_index *x, rf_node *const *nodes,
                        const char *s, size_t len);
/* Adds id under name (not yet in x). -1 when memory runs out (x unchanged),
 * else 0. */
int rf__name_index_add(rf__name_index *x, const char *name, int id);
/* Removes id, which is in x under name. */
void rf__name_index_remove(rf__name_index *x, const char *name, int id);
/* *dst = a copy of src (for a graph copy with the same ids); -1 when memory
 * runs out (dst untouched). */
int rf__name_index_copy(rf__name_index *dst, const rf__name_index *src);
void rf__name_index_free(rf__name_index *x);

/* The largest distance of an entry from its home slot (how far a lookup may
 * probe), and the sum of those distances (for the mean); for tests. */
void rf__name_index_displacement(const rf__name_index *x, uint32_t *max,
                                 uint64_t *sum);

#endif
