/* graph/graph.c - the graph object: creation, the sticky error, the device
 * scope stack, name lookup and generation, and the read-only accessors of the
 * public API. Accessors given NULL or out-of-range arguments return a neutral
 * value (NULL, "", 0, the invalid output). */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "graph/graph_internal.h"

typedef struct rf__name_count {
  char *base;
  int64_t next;
  UT_hash_handle hh;
} rf__name_count;

rf_graph *rf_graph_new(void) {
  rf_graph *g = rf__calloc(1, sizeof *g);
  return g;
}

void rf_graph_free(rf_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *n = g->nodes[i];
    if (!n) continue;
    for (int k = 0; k < n->num_in_edges; k++) rf__free(n->in_edges[k]);
    n->num_in_edges = 0;
  }
  rf__name_index_free(&g->names);
  for (int i = 0; i < g->num_ids; i++) rf__node_free(g->nodes[i]);
  rf__free(g->nodes);
  rf__name_count *c, *tmp;
  HASH_ITER(hh, g->name_counts, c, tmp) {
    HASH_DEL(g->name_counts, c);
    rf__free(c->base);
    rf__free(c);
  }
  rf_status_free(g->error);
  rf__free(g);
}

rf_status *rf_graph_status(const rf_graph *g) {
  if (!g) return rf__invalid("rf_graph_status: NULL graph");
  if (!g->error) return NULL;
  return rf__status_copy(g->error);
}

void rf_graph_clear_status(rf_graph *g) {
  if (!g) return;
  rf_status_free(g->error);
  g->error = NULL;
}

bool rf__graph_failed(const rf_graph *g) { return !g || g->error != NULL; }

void rf__graph_record(rf_graph *g, rf_status *st) {
  if (!st) return;
  if (!g || g->error) {
    rf_status_free(st);
    return;
  }
  g->error = st;
}

/* ---- device scope ---- */

rf_status *rf_graph_push_device(rf_graph *g, const char *device) {
  if (!g) return rf__invalid("rf_graph_push_device: NULL graph");
  if (!device) return rf__invalid("rf_graph_push_device: NULL device");
  if (g->device_depth == RF_MAX_DEVICE_SCOPE)
    return rf__invalid("device scope '%s' nested deeper than %d", device,
                       RF_MAX_DEVICE_SCOPE);
  char canon[RF_DEVICE_NAME_MAX] = "";
  if (device[0]) {
    rf__device_name d;
    RF_CHECK(rf__device_name_parse(device, &d));
    rf__device_name_format(&d, canon, sizeof canon);
  }
  memcpy(g->device_scope[g->device_depth++], canon, sizeof canon);
  return NULL;
}

void rf_graph_pop_device(rf_graph *g) {
  if (g && g->device_depth > 0) g->device_depth--;
}

const char *rf__graph_scope_device(const rf_graph *g) {
  if (!g || g->device_depth == 0) return "";
  return g->device_scope[g->device_depth - 1];
}

/* ---- names ---- */

static bool name_used(const rf_graph *g, const char *name) {
  return rf__name_index_find(&g->names, g->nodes, name, strlen(name)) >= 0;
}

/* The counter for base, created on first use; NULL if memory runs out (the
 * caller then starts from 1, which is slower but still correct). */
static rf__name_count *counter_for(rf_graph *g, const char *base) {
  rf__name_count *c = NULL;
  HASH_FIND_STR(g->name_counts, base, c);
  if (c) return c;
  c = rf__calloc(1, sizeof *c);
  char *b = rf__strdup(base);
  if (!c || !b) {
    rf__free(c);
    rf__free(b);
    return NULL;
  }
  c->base = b;
  c->next = 1;
  int rf__hash_oom = 0;
  HASH_ADD_KEYPTR(hh, g->name_counts, c->base, strlen(c->base), c);
  if (rf__hash_oom) {
    rf__free(b);
    rf__free(c);
    return NULL;
  }
  return c;
}

void rf__graph_unique_name(rf_graph *g, const char *base, char *buf,
                           size_t len) {
  if (!buf || len == 0) return;
  if (!base || !base[0]) base = "node";
  snprintf(buf, len, "%s", base);
  if (!g || !name_used(g, buf)) return;
  rf__name_count *c = counter_for(g, base);
  int64_t k = c ? c->next : 1;
  for (;; k++) {
    snprintf(buf, len, "%s_%lld", base, (long long)k);
    if (!name_used(g, buf)) break;
  }
  if (c) c->next = k + 1;
}

rf_node *rf_graph_find_node(const rf_graph *g, const char *name) {
  if (!g || !name) return NULL;
  int id = rf__name_index_find(&g->names, g->nodes, name, strlen(name));
  return id >= 0 ? g->nodes[id] : NULL;
}

int rf_graph_num_nodes(const rf_graph *g) { return g ? g->num_live : 0; }

rf_node *rf_graph_node(const rf_graph *g, int i) {
  if (!g || i < 0 || i >= g->num_live) return NULL;
  if (g->num_live == g->num_ids) return g->nodes[i]; /* nothing removed */
  for (int id = 0; id < g->num_ids; id++) {
    if (g->nodes[id] && i-- == 0) return g->nodes[id];
  }
  return NULL;
}

bool rf__graph_owns(const rf_graph *g, const rf_node *n) {
  return g && n && n->id >= 0 && n->id < g->num_ids && g->nodes[n->id] == n;
}

/* ---- node accessors ---- */

const char *rf_node_name(const rf_node *n) { return n ? n->name : ""; }

const char *rf__node_op_name(const rf_node *n) {
  return n && n->op ? n->op->name : "";
}

const char *rf_node_op(const rf_node *n) { return rf__node_op_name(n); }

const char *rf_node_device(const rf_node *n) {
  return n && n->requested_device ? n->requested_device : "";
}

int rf_node_num_inputs(const rf_node *n) { return n ? n->num_inputs : 0; }
int rf_node_num_outputs(const rf_node *n) { return n ? n->num_outputs : 0; }

rf_output rf_node_input(const rf_node *n, int i) {
  rf_output none = {NULL, 0};
  if (!n || i < 0 || i >= n->num_inputs || !n->data_in[i]) return none;
  return rf__input(n, i);
}

int rf_node_num_control_inputs(const rf_node *n) {
  if (!n) return 0;
  int c = 0;
  for (int k = 0; k < n->num_in_edges; k++)
    c += n->in_edges[k]->dst_in == RF_CONTROL_SLOT;
  return c;
}

rf_node *rf_node_control_input(const rf_node *n, int i) {
  if (!n || i < 0) return NULL;
  for (int k = 0; k < n->num_in_edges; k++)
    if (n->in_edges[k]->dst_in == RF_CONTROL_SLOT && i-- == 0)
      return n->in_edges[k]->src;
  return NULL;
}

rf_dtype rf_output_dtype(rf_output o) {
  if (!o.node || o.index < 0 || o.index >= o.node->num_outputs)
    return RF_DTYPE_INVALID;
  return o.node->out_dtypes[o.index];
}

rf_shape rf_output_shape(rf_output o) {
  if (!o.node || o.index < 0 || o.index >= o.node->num_outputs)
    return rf_shape_unknown();
  return o.node->out_shapes[o.index];
}

rf_status *rf_node_set_device(rf_node *n, const char *device) {
  if (!n) return rf__invalid("rf_node_set_device: NULL node");
  if (!device) return rf__invalid("rf_node_set_device: NULL device");
  char canon[RF_DEVICE_NAME_MAX] = "";
  if (device[0]) {
    rf__device_name d;
    rf_status *st = rf__device_name_parse(device, &d);
    if (st)
      return rf__status_prefix(st, "node '%s' (%s)", n->name,
                               rf__node_op_name(n));
    rf__device_name_format(&d, canon, sizeof canon);
  }
  char *c = rf__strdup(canon);
  RF_CHECK_ALLOC(c);
  rf__free(n->requested_device);
  n->requested_device = c;
  return NULL;
}

/* ---- attribute reads ---- */

static rf_status *node_attr(const rf_node *n, const char *name, rf_status *st) {
  if (!st) return NULL;
  return rf__status_prefix(st, "node '%s' (%s)", n->name, rf__node_op_name(n));
}

#define RF_NODE_ATTR(fn, ctype, getter)                                 \
  rf_status *fn(const rf_node *n, const char *name, ctype *out) {       \
    if (!n || !name || !out) return rf__invalid(#fn ": NULL argument"); \
    return node_attr(n, name, getter(&n->attrs, name, out));            \
  }

RF_NODE_ATTR(rf_node_attr_int, int64_t, rf__attrs_get_int)
RF_NODE_ATTR(rf_node_attr_float, double, rf__attrs_get_float)
RF_NODE_ATTR(rf_node_attr_bool, bool, rf__attrs_get_bool)
RF_NODE_ATTR(rf_node_attr_string, const char *, rf__attrs_get_string)
RF_NODE_ATTR(rf_node_attr_dtype, rf_dtype, rf__attrs_get_type)
RF_NODE_ATTR(rf_node_attr_shape, rf_shape, rf__attrs_get_shape)
#undef RF_NODE_ATTR
