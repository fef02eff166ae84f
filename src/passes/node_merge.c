/* passes/node_merge.c - see node_merge.h. */
#include "passes/node_merge.h"

#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "ops/op_registry.h"

rf_status *rf__merge_ctx_init(rf__merge_ctx *c, rf_graph *g) {
  size_t ids = (size_t)g->num_ids + 1;
  *c = (rf__merge_ctx){.g = g};
  c->seen = rf__calloc(2 * ids, sizeof *c->seen);
  c->member = rf__calloc(ids, 1);
  if (c->seen && c->member) {
    c->stack = c->seen + ids;
    return NULL;
  }
  rf__merge_ctx_free(c);
  return rf__oom();
}

void rf__merge_ctx_free(rf__merge_ctx *c) {
  rf__free(c->seen);
  rf__free(c->member);
  c->seen = c->stack = NULL;
  c->member = NULL;
}

/* Whether a path leaves a member and reaches a member through a node that is
 * none. */
static bool path_outside(rf__merge_ctx *c, rf_node *const *m, int nm) {
  int top = 0;
  c->stamp++;
  for (int i = 0; i < nm; i++)
    for (int k = 0; k < m[i]->num_out_edges; k++) {
      const rf_node *w = m[i]->out_edges[k]->dst;
      if (!c->member[w->id] && c->seen[w->id] != c->stamp) {
        c->seen[w->id] = c->stamp;
        c->stack[top++] = w->id;
      }
    }
  while (top > 0) {
    const rf_node *v = c->g->nodes[c->stack[--top]];
    for (int k = 0; k < v->num_out_edges; k++) {
      const rf_node *w = v->out_edges[k]->dst;
      if (c->member[w->id]) return true;
      if (c->seen[w->id] == c->stamp) continue;
      c->seen[w->id] = c->stamp;
      c->stack[top++] = w->id;
    }
  }
  return false;
}

bool rf__merge_ok(rf__merge_ctx *c, rf_node *const *m, int nm) {
  for (int i = 0; i < nm; i++) c->member[m[i]->id] = 1;
  bool ok = !path_outside(c, m, nm);
  for (int i = 0; i < nm; i++) c->member[m[i]->id] = 0;
  return ok;
}

rf_status *rf__merge_redirect(rf_graph *g, rf_node *from, int out, rf_node *to,
                              int to_out) {
  int n = 0;
  rf__edge **edges =
      rf__malloc(sizeof *edges * (size_t)(from->num_out_edges + 1));
  RF_CHECK_ALLOC(edges);
  for (int k = 0; k < from->num_out_edges; k++)
    if (from->out_edges[k]->src_out == out) edges[n++] = from->out_edges[k];
  rf_status *st = NULL;
  for (int k = 0; !st && k < n; k++)
    st = rf__graph_update_edge(g, edges[k]->dst, edges[k]->dst_in, to, to_out);
  rf__free(edges);
  return st;
}

rf_status *rf__merge_retire(rf__merge_ctx *c, rf_node *const *m, int nm,
                            rf_node *to) {
  for (int i = 0; i < nm; i++) c->member[m[i]->id] = 1;
  rf_status *st = NULL;
  for (int i = 0; !st && i < nm; i++) {
    for (int k = 0; !st && k < m[i]->num_in_edges; k++) {
      rf_node *src = m[i]->in_edges[k]->src;
      if (m[i]->in_edges[k]->dst_in == RF_CONTROL_SLOT && !c->member[src->id] &&
          !rf__graph_has_control_edge(src, to))
        st =
            rf__graph_add_edge(c->g, src, RF_CONTROL_SLOT, to, RF_CONTROL_SLOT);
    }
    for (int k = 0; !st && k < m[i]->num_out_edges; k++) {
      rf_node *dst = m[i]->out_edges[k]->dst;
      if (m[i]->out_edges[k]->src_out == RF_CONTROL_SLOT &&
          !c->member[dst->id] && !rf__graph_has_control_edge(to, dst))
        st =
            rf__graph_add_edge(c->g, to, RF_CONTROL_SLOT, dst, RF_CONTROL_SLOT);
    }
  }
  for (int i = 0; i < nm; i++) c->member[m[i]->id] = 0;
  for (int i = 0; !st && i < nm; i++) rf__graph_remove_node(c->g, m[i]);
  return st;
}

rf__edge *rf__merge_only_reader(const rf_node *n, int out) {
  rf__edge *e = NULL;
  for (int k = 0; k < n->num_out_edges; k++) {
    if (n->out_edges[k]->src_out != out) continue;
    if (e) return NULL;
    e = n->out_edges[k];
  }
  return e;
}

rf_status *rf__merge_add_node(rf_graph *g, const rf_node *like,
                              const char *device, const char *op_name,
                              const rf_output *in, int nin,
                              const rf__attrs *attrs, rf_node **out) {
  const rf__op_def *op = rf__op_find(op_name);
  if (!op) return rf__internal("op %s is not registered", op_name);
  size_t len = strlen(like->name) + strlen(op_name) + 32;
  char *mem = rf__malloc(2 * len), *stem = mem, *name = mem + len;
  RF_CHECK_ALLOC(mem);
  snprintf(stem, len, "%s/%s", like->name, op_name);
  rf__graph_unique_name(g, stem, name, len);
  rf_status *st = rf__graph_add_node(g, op, name, device, in, nin, attrs, out);
  if (!st) (*out)->assigned_device = like->assigned_device;
  rf__free(mem);
  return st;
}
