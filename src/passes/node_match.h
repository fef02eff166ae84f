/* passes/node_match.h - what the rewrite passes ask of a node while they
 * look for a pattern: its op, a bool attr, a Const's value. */
#ifndef RF_PASSES_NODE_MATCH_H
#define RF_PASSES_NODE_MATCH_H

#include <stdbool.h>
#include <string.h>

#include "graph/attrs.h"
#include "graph/graph.h"
#include "ops/op_registry.h"

/* Whether n runs op `op`. */
static inline bool rf__node_is(const rf_node *n, const char *op) {
  return strcmp(n->op->name, op) == 0;
}

/* n's bool attr `name`; false when it has none. */
static inline bool rf__node_flag(const rf_node *n, const char *name) {
  bool v = false;
  rf_status_free(rf__attrs_get_bool(&n->attrs, name, &v));
  return v;
}

/* The value of Const n (not retained), or NULL when n is no Const. */
static inline rf_tensor *rf__node_const_value(const rf_node *n) {
  rf_tensor *t = NULL;
  if (!rf__node_is(n, "Const")) return NULL;
  rf_status *st = rf__attrs_get_tensor(&n->attrs, "value", &t);
  rf_status_free(st);
  return st ? NULL : t;
}

#endif
