/* graph/graph_dot.c - Graphviz DOT export: one cluster per device, collective
 * participants filled, control edges dashed, data edges labelled with dtype
 * and shape. Pure text; rendering is left to `dot`. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "ops/op_registry.h"
#include "ringflow/graph_io.h"

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *s = rf__realloc(b->s, cap); /* freed by rf_string_free */
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Writes s escaped for the inside of a DOT string (" and \). */
static void put_escaped(sbuf *b, const char *s) {
  for (; *s; s++) put(b, "%s%c", (*s == '"' || *s == '\\') ? "\\" : "", *s);
}

static void put_quoted(sbuf *b, const char *s) {
  put(b, "\"");
  put_escaped(b, s);
  put(b, "\"");
}

static bool is_collective(const rf_node *n) {
  static const char *const ops[] = {
      "AllReduce",   "AllGather",      "ReduceScatter",
      "Reduce",      "Broadcast",      "_ReduceSend",
      "_ReduceRecv", "_BroadcastSend", "_BroadcastRecv"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    if (strcmp(n->op->name, ops[i]) == 0) return true;
  return false;
}

static void put_node(sbuf *b, const rf_node *n) {
  put(b, "    n%d [label=\"", n->id); /* "name\nop": DOT's line break */
  put_escaped(b, n->name);
  put(b, "\\n");
  put_escaped(b, n->op->name);
  put(b, "\"");
  if (is_collective(n))
    put(b, ", style=filled, fillcolor=\"#f4b183\", shape=box");
  else if (n->op->name[0] == '_')
    put(b, ", style=filled, fillcolor=\"#d9d9d9\"");
  put(b, "];\n");
}

rf_status *rf_graph_to_dot(const rf_graph *g, char **out) {
  if (!g || !out) return rf__invalid("rf_graph_to_dot: NULL argument");
  sbuf b = {0};
  put(&b,
      "digraph ringflow {\n  rankdir=TB;\n  node [shape=ellipse, "
      "fontname=\"Helvetica\", fontsize=10];\n  edge [fontsize=8];\n");
  /* Clusters: walk devices in first-appearance order. */
  bool *done = rf__calloc((size_t)g->num_ids + 1, 1);
  if (!done) {
    rf__free(b.s);
    return rf__oom();
  }
  int cluster = 0;
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *first = g->nodes[id];
    if (!first || done[id]) continue;
    const char *dev = first->requested_device;
    if (dev[0]) {
      put(&b, "  subgraph cluster_%d {\n    label=", cluster++);
      put_quoted(&b, dev);
      put(&b, ";\n    style=rounded;\n");
    }
    for (int j = id; j < g->num_ids; j++) {
      const rf_node *n = g->nodes[j];
      if (!n || done[j] || strcmp(n->requested_device, dev) != 0) continue;
      done[j] = true;
      put_node(&b, n);
    }
    if (dev[0]) put(&b, "  }\n");
  }
  rf__free(done);
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *n = g->nodes[id];
    if (!n) continue;
    for (int i = 0; i < n->num_out_edges; i++) {
      const rf__edge *e = n->out_edges[i];
      if (e->src_out == RF_CONTROL_SLOT) {
        put(&b, "  n%d -> n%d [style=dashed, color=\"#808080\"];\n", n->id,
            e->dst->id);
        continue;
      }
      char shape[128];
      rf_shape_format(&n->out_shapes[e->src_out], shape, sizeof shape);
      put(&b, "  n%d -> n%d [label=\"%s%s\"];\n", n->id, e->dst->id,
          rf_dtype_name(n->out_dtypes[e->src_out]), shape);
    }
  }
  put(&b, "}\n");
  if (b.oom) {
    rf__free(b.s);
    return rf__oom();
  }
  *out = b.s;
  return NULL;
}
