/* graph/graph_edit.c - structural edits: node allocation and insertion, edges,
 * removal, deep copy and cycle-checked control edges. Every edit that can fail
 * allocates everything it needs before changing anything, so a failed edit
 * leaves the graph as it was (the invariants of graph.h hold after each call;
 * rf__graph_remove_node may leave consumers' data inputs unfed, which the
 * pass doing it must repair). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "graph/graph_internal.h"

/* ---- nodes ---- */

void rf__node_free(rf_node *n) {
  if (!n) return;
  rf__free(n->name);
  rf__free(n->requested_device);
  rf__free(n->data_in);
  rf__free(n->arg_start);
  rf__free(n->in_edges ? n->in_edges - n->skip_in_edges : NULL);
  rf__free(n->out_edges ? n->out_edges - n->skip_out_edges : NULL);
  rf__free(n->out_dtypes);
  rf__free(n->out_shapes);
  rf__attrs_clear(&n->attrs);
  rf__free(n);
}

rf_status *rf__node_alloc(const rf__op_def *op, const char *name,
                          const char *device, const int *arg_sizes,
                          int num_inputs, rf__attrs *attrs, int num_outputs,
                          rf_dtype **out_dtypes, rf_node **out) {
  rf_node *n = rf__calloc(1, sizeof *n);
  RF_CHECK_ALLOC(n);
  n->name = rf__strdup(name);
  n->requested_device = rf__strdup(device ? device : "");
  n->data_in = rf__calloc((size_t)num_inputs + 1, sizeof *n->data_in);
  n->arg_start = rf__calloc((size_t)op->num_inputs + 1, sizeof *n->arg_start);
  n->out_shapes = rf__calloc((size_t)num_outputs + 1, sizeof *n->out_shapes);
  if (!n->name || !n->requested_device || !n->data_in || !n->arg_start ||
      !n->out_shapes) {
    rf__node_free(n);
    return rf__oom();
  }
  n->id = -1;
  n->op = op;
  n->assigned_device = -1;
  n->num_inputs = num_inputs;
  for (int a = 0; a < op->num_inputs; a++)
    n->arg_start[a + 1] = n->arg_start[a] + arg_sizes[a];
  n->num_outputs = num_outputs;
  for (int k = 0; k < num_outputs; k++) n->out_shapes[k] = rf_shape_unknown();
  n->out_dtypes = *out_dtypes;
  *out_dtypes = NULL;
  n->attrs = *attrs;
  memset(attrs, 0, sizeof *attrs);
  *out = n;
  return NULL;
}

/* ---- a node's edge lists ---- */

typedef struct edge_list {
  rf__edge ***list;
  int *num, *cap, *skip;
} edge_list;

static edge_list list_of(rf_node *n, bool out) {
  if (out)
    return (edge_list){&n->out_edges, &n->num_out_edges, &n->cap_out_edges,
                       &n->skip_out_edges};
  return (edge_list){&n->in_edges, &n->num_in_edges, &n->cap_in_edges,
                     &n->skip_in_edges};
}

int rf__node_reserve_edges(rf_node *n, bool out, int need) {
  edge_list l = list_of(n, out);
  if (need <= *l.cap - *l.skip) return 0;
  int num = *l.num;
  /* Slots freed at the front are taken back once they are at least half as
   * many as the edges moved for it (so each removal pays for two moves);
   * fewer stay, and the allocation grows. Callers reserving several edges
   * ahead count them in num, past what is written: the slots of those
   * inside the allocation move along. */
  if (*l.skip > 0 && *l.skip >= num / 2) {
    rf__edge **base = *l.list - *l.skip;
    int held = *l.cap - *l.skip;
    memmove(base, *l.list, sizeof *base * (size_t)(num < held ? num : held));
    *l.list = base;
    *l.skip = 0;
    if (need <= *l.cap) return 0;
  }
  rf__edge **base = *l.list ? *l.list - *l.skip : NULL;
  if (rf__grow(&base, l.cap, need + *l.skip, sizeof *base)) return -1;
  *l.list = base + *l.skip;
  return 0;
}

void rf__node_unlink_edge(rf_node *n, bool out, const rf__edge *e) {
  edge_list l = list_of(n, out);
  rf__edge **a = *l.list;
  int num = *l.num, k = -1;
  /* from both ends at once: a node's first and last edges go fastest */
  for (int i = 0, j = num - 1; i <= j; i++, j--) {
    if (a[i] == e) {
      k = i;
      break;
    }
    if (a[j] == e) {
      k = j;
      break;
    }
  }
  if (k < 0) return;
  if (k < num - 1 - k) { /* the edges before it move up one slot */
    memmove(a + 1, a, sizeof *a * (size_t)k);
    *l.list = a + 1;
    (*l.skip)++;
  } else {
    memmove(a + k, a + k + 1, sizeof *a * (size_t)(num - 1 - k));
  }
  if (--*l.num == 0 && *l.skip) {
    *l.list -= *l.skip;
    *l.skip = 0;
  }
}

static rf__edge *edge_new(rf_node *src, int src_out, rf_node *dst, int dst_in) {
  rf__edge *e = rf__malloc(sizeof *e);
  if (e) *e = (rf__edge){src, src_out, dst, dst_in};
  return e;
}

/* Links e into both endpoints; the arrays have room already. */
static void edge_link(rf__edge *e) {
  e->src->out_edges[e->src->num_out_edges++] = e;
  e->dst->in_edges[e->dst->num_in_edges++] = e;
  if (e->dst_in != RF_CONTROL_SLOT) e->dst->data_in[e->dst_in] = e;
}

/* Makes room for `extra` more out-edges of src; the count is bumped so
 * repeated sources add up, and must be undone with reserve_undo. */
static bool reserve_out(rf_node *src) {
  src->num_out_edges++;
  if (rf__node_reserve_edges(src, true, src->num_out_edges) == 0) return true;
  src->num_out_edges--;
  return false;
}

static bool has_control_src(rf_node *const *c, int k) {
  for (int j = 0; j < k; j++)
    if (c[j] == c[k]) return true;
  return false;
}

rf_status *rf__graph_insert(rf_graph *g, rf_node *n, const rf_output *inputs,
                            rf_node *const *controls, int num_controls) {
  int total = n->num_inputs + num_controls;
  rf__edge **edges = rf__calloc((size_t)total + 1, sizeof *edges);
  RF_CHECK_ALLOC(edges);
  int ne = 0, reserved = 0;
  rf_status *st = NULL;
  if (rf__grow(&g->nodes, &g->cap_ids, g->num_ids + 1, sizeof *g->nodes) ||
      rf__node_reserve_edges(n, false, total))
    goto oom;
  for (int k = 0; k < n->num_inputs; k++) {
    edges[ne] = edge_new(inputs[k].node, inputs[k].index, n, k);
    if (!edges[ne]) goto oom;
    ne++;
  }
  for (int k = 0; k < num_controls; k++) {
    if (has_control_src(controls, k)) continue;
    edges[ne] = edge_new(controls[k], RF_CONTROL_SLOT, n, RF_CONTROL_SLOT);
    if (!edges[ne]) goto oom;
    ne++;
  }
  for (; reserved < ne; reserved++)
    if (!reserve_out(edges[reserved]->src)) goto oom;
  for (int k = 0; k < ne; k++) edges[k]->src->num_out_edges--;
  reserved = 0;
  if (rf__name_index_add(&g->names, n->name, g->num_ids)) goto oom;
  n->id = g->num_ids++;
  g->nodes[n->id] = n;
  g->num_live++;
  for (int k = 0; k < ne; k++) edge_link(edges[k]);
  rf__free(edges);
  return NULL;
oom:
  st = rf__oom();
  for (int k = 0; k < reserved; k++) edges[k]->src->num_out_edges--;
  for (int k = 0; k < ne; k++) rf__free(edges[k]);
  rf__free(edges);
  return st;
}

rf_status *rf__graph_add_node(rf_graph *g, const rf__op_def *op,
                              const char *name, const char *device,
                              const rf_output *inputs, int num_inputs,
                              const rf__attrs *attrs, rf_node **out) {
  if (!g || !op || num_inputs < 0 || (num_inputs > 0 && !inputs))
    return rf__invalid("rf__graph_add_node: bad argument");
  char buf[256];
  const char *nm = name;
  if (!nm) {
    rf__graph_unique_name(g, op->name, buf, sizeof buf);
    nm = buf;
  } else if (rf_graph_find_node(g, nm)) {
    return rf__error(RF_ALREADY_EXISTS,
                     "node '%s' (%s): the name is already used", nm, op->name);
  }
  for (int k = 0; k < num_inputs; k++)
    if (!rf__graph_owns(g, inputs[k].node) || inputs[k].index < 0 ||
        inputs[k].index >= inputs[k].node->num_outputs)
      return rf__invalid(
          "node '%s' (%s): input %d is not an output of a node "
          "of this graph",
          nm, op->name, k);
  int arg_sizes[RF_MAX_OP_ARGS];
  rf__attrs a = {NULL, 0, 0};
  if (attrs) RF_CHECK(rf__attrs_copy(attrs, &a));
  rf_dtype in_dtypes_small[16], *in_dtypes = in_dtypes_small;
  rf_dtype *out_dtypes = NULL;
  rf_node *n = NULL;
  int num_outputs = 0;
  rf_status *st = NULL;
  if (num_inputs > 16) {
    in_dtypes = rf__malloc(sizeof *in_dtypes * (size_t)num_inputs);
    if (!in_dtypes) RF_CHECK_GOTO(rf__oom(), st, done);
  }
  for (int k = 0; k < num_inputs; k++)
    in_dtypes[k] = rf_output_dtype(inputs[k]);
  RF_CHECK_GOTO(rf__infer_arg_sizes(op, nm, &a, num_inputs, arg_sizes), st,
                done);
  RF_CHECK_GOTO(rf__resolve_signature(op, nm, &a, in_dtypes, arg_sizes, false,
                                      &num_outputs, &out_dtypes),
                st, done);
  RF_CHECK_GOTO(rf__node_alloc(op, nm, device, arg_sizes, num_inputs, &a,
                               num_outputs, &out_dtypes, &n),
                st, done);
  /* Internal nodes get shapes when the function can work them out; a
   * failure only leaves them unknown. */
  rf_status_free(rf__run_shape_fn(n, inputs));
  RF_CHECK_GOTO(rf__graph_insert(g, n, inputs, NULL, 0), st, done);
  if (out) *out = n;
  n = NULL;
done:
  rf__node_free(n);
  rf__free(out_dtypes);
  rf__attrs_clear(&a);
  if (in_dtypes != in_dtypes_small) rf__free(in_dtypes);
  return st;
}

/* ---- edges ---- */

bool rf__graph_has_control_edge(const rf_node *src, const rf_node *dst) {
  if (!src || !dst) return false;
  for (int k = 0; k < dst->num_in_edges; k++)
    if (dst->in_edges[k]->src == src &&
        dst->in_edges[k]->dst_in == RF_CONTROL_SLOT)
      return true;
  return false;
}

rf_status *rf__graph_add_edge(rf_graph *g, rf_node *src, int src_out,
                              rf_node *dst, int dst_in) {
  if (!rf__graph_owns(g, src) || !rf__graph_owns(g, dst))
    return rf__invalid("rf__graph_add_edge: node not in this graph");
  bool control = src_out == RF_CONTROL_SLOT;
  if (control != (dst_in == RF_CONTROL_SLOT))
    return rf__invalid("edge %s -> %s: mixes data and control slots", src->name,
                       dst->name);
  if (control) {
    if (src == dst)
      return rf__invalid("control edge from node '%s' to itself", src->name);
    if (rf__graph_has_control_edge(src, dst)) return NULL;
  } else {
    if (src_out < 0 || src_out >= src->num_outputs)
      return rf__invalid("node '%s' (%s) has no output %d", src->name,
                         rf__node_op_name(src), src_out);
    if (dst_in < 0 || dst_in >= dst->num_inputs)
      return rf__invalid("node '%s' (%s) has no input %d", dst->name,
                         rf__node_op_name(dst), dst_in);
    if (dst->data_in[dst_in])
      return rf__invalid("input %d of node '%s' is already fed", dst_in,
                         dst->name);
  }
  rf__edge *e = edge_new(src, src_out, dst, dst_in);
  RF_CHECK_ALLOC(e);
  if (rf__node_reserve_edges(dst, false, dst->num_in_edges + 1) ||
      rf__node_reserve_edges(src, true, src->num_out_edges + 1)) {
    rf__free(e);
    return rf__oom();
  }
  edge_link(e);
  return NULL;
}

void rf__graph_remove_edge(rf_graph *g, rf__edge *e) {
  (void)g;
  if (!e) return;
  rf__node_unlink_edge(e->src, true, e);
  rf__node_unlink_edge(e->dst, false, e);
  if (e->dst_in != RF_CONTROL_SLOT && e->dst->data_in[e->dst_in] == e)
    e->dst->data_in[e->dst_in] = NULL;
  rf__free(e);
}

rf_status *rf__graph_update_edge(rf_graph *g, rf_node *dst, int dst_in,
                                 rf_node *src, int src_out) {
  if (!rf__graph_owns(g, src) || !rf__graph_owns(g, dst))
    return rf__invalid("rf__graph_update_edge: node not in this graph");
  if (dst_in < 0 || dst_in >= dst->num_inputs)
    return rf__invalid("node '%s' (%s) has no input %d", dst->name,
                       rf__node_op_name(dst), dst_in);
  if (src_out < 0 || src_out >= src->num_outputs)
    return rf__invalid("node '%s' (%s) has no output %d", src->name,
                       rf__node_op_name(src), src_out);
  rf__edge *e = dst->data_in[dst_in];
  if (!e) return rf__graph_add_edge(g, src, src_out, dst, dst_in);
  if (e->src != src &&
      rf__node_reserve_edges(src, true, src->num_out_edges + 1))
    return rf__oom();
  if (e->src != src) {
    rf__node_unlink_edge(e->src, true, e);
    src->out_edges[src->num_out_edges++] = e;
    e->src = src;
  }
  e->src_out = src_out;
  return NULL;
}

void rf__graph_remove_node(rf_graph *g, rf_node *n) {
  if (!rf__graph_owns(g, n)) return;
  /* Each edge leaves the list of its other end (the order of the rest kept
   * there); n's own lists go with n. An edge from n to itself is in both
   * and is freed once, with the in-edges. */
  for (int k = 0; k < n->num_out_edges; k++) {
    rf__edge *e = n->out_edges[k];
    if (e->dst == n) continue;
    rf__node_unlink_edge(e->dst, false, e);
    if (e->dst_in != RF_CONTROL_SLOT && e->dst->data_in[e->dst_in] == e)
      e->dst->data_in[e->dst_in] = NULL;
    rf__free(e);
  }
  for (int k = 0; k < n->num_in_edges; k++) {
    rf__edge *e = n->in_edges[k];
    if (e->src != n) rf__node_unlink_edge(e->src, true, e);
    rf__free(e);
  }
  n->num_in_edges = n->num_out_edges = 0;
  rf__name_index_remove(&g->names, n->name, n->id);
  g->nodes[n->id] = NULL;
  g->num_live--;
  rf__node_free(n);
}

/* ---- control edges from users: no cycles ---- */

/* True when `to` is reachable from `from` along out-edges. */
static rf_status *reaches(const rf_graph *g, rf_node *from, rf_node *to,
                          bool *found) {
  *found = false;
  if (from == to) return *found = true, NULL;
  char *seen = rf__calloc((size_t)g->num_ids, 1);
  rf_node **stack = rf__malloc(sizeof *stack * (size_t)g->num_ids);
  if (!seen || !stack) {
    rf__free(seen);
    rf__free(stack);
    return rf__oom();
  }
  int sp = 0;
  stack[sp++] = from;
  seen[from->id] = 1;
  while (sp && !*found) {
    rf_node *n = stack[--sp];
    for (int k = 0; k < n->num_out_edges; k++) {
      rf_node *d = n->out_edges[k]->dst;
      if (d == to) *found = true;
      if (seen[d->id]) continue;
      seen[d->id] = 1;
      stack[sp++] = d;
    }
  }
  rf__free(seen);
  rf__free(stack);
  return NULL;
}

/* A node in a message: its name, op and requested device, as
 * "node 'N' (OP on DEVICE)" or "node 'N' (OP)". */
#define NODE_FMT "node '%s' (%s%s%s)"
#define NODE_ARGS(n)                                                   \
  (n)->name, rf__node_op_name(n),                                      \
      (n)->requested_device && (n)->requested_device[0] ? " on " : "", \
      (n)->requested_device ? (n)->requested_device : ""

rf_status *rf_graph_add_control_edge(rf_graph *g, rf_node *src, rf_node *dst) {
  if (!g || !src || !dst)
    return rf__invalid("rf_graph_add_control_edge: NULL %s",
                       !g     ? "graph"
                       : !src ? "source node"
                              : "destination node");
  /* Which end is foreign, and what it is: "'a' or 'b'" named neither. */
  for (int k = 0; k < 2; k++) {
    const rf_node *n = k ? dst : src;
    if (!rf__graph_owns(g, n))
      return rf__invalid("rf_graph_add_control_edge: the %s, " NODE_FMT
                         ", is not in this graph",
                         k ? "destination" : "source", NODE_ARGS(n));
  }
  if (rf__graph_has_control_edge(src, dst)) return NULL;
  bool cycle;
  RF_CHECK(reaches(g, dst, src, &cycle));
  if (cycle)
    return rf__invalid("control edge from " NODE_FMT " to " NODE_FMT
                       " would create a cycle",
                       NODE_ARGS(src), NODE_ARGS(dst));
  return rf__graph_add_edge(g, src, RF_CONTROL_SLOT, dst, RF_CONTROL_SLOT);
}
#undef NODE_FMT
#undef NODE_ARGS

/* ---- deep copy ---- */

/* Old control edge -> its copy. Data edges are found through data_in; a
 * control edge has no slot, so the copy looks it up here: open addressing
 * by address, linear in the edges (a sort and a binary search per edge had
 * been O(E log E), with cache misses at every step on large graphs). */
typedef struct edge_map {
  struct {
    const rf__edge *old;
    rf__edge *neu;
  } * slots;
  size_t mask;
} edge_map;

static size_t edge_home(const edge_map *m, const rf__edge *e) {
  return (size_t)(((uint64_t)(uintptr_t)e * 0x9e3779b97f4a7c15ull) >> 32) &
         m->mask;
}

static int edge_map_init(edge_map *m, int n) {
  size_t cap = 16;
  while (cap < 2 * (size_t)n) cap *= 2;
  m->slots = rf__calloc(cap, sizeof *m->slots);
  m->mask = cap - 1;
  return m->slots ? 0 : -1;
}

static void edge_map_put(edge_map *m, const rf__edge *old, rf__edge *neu) {
  size_t i = edge_home(m, old);
  while (m->slots[i].old) i = (i + 1) & m->mask;
  m->slots[i].old = old;
  m->slots[i].neu = neu;
}

static rf__edge *edge_map_get(const edge_map *m, const rf__edge *old) {
  size_t i = edge_home(m, old);
  while (m->slots[i].old != old) i = (i + 1) & m->mask;
  return m->slots[i].neu;
}

static rf_status *copy_node(const rf_node *n, rf_node **out) {
  int sizes[RF_MAX_OP_ARGS];
  for (int a = 0; a < n->op->num_inputs; a++)
    sizes[a] = n->arg_start[a + 1] - n->arg_start[a];
  rf__attrs attrs;
  RF_CHECK(rf__attrs_copy(&n->attrs, &attrs));
  rf_dtype *dt = rf__malloc(sizeof *dt * (size_t)(n->num_outputs + 1));
  rf_node *c = NULL;
  rf_status *st = dt ? NULL : rf__oom();
  if (!st) {
    memcpy(dt, n->out_dtypes, sizeof *dt * (size_t)n->num_outputs);
    st = rf__node_alloc(n->op, n->name, n->requested_device, sizes,
                        n->num_inputs, &attrs, n->num_outputs, &dt, &c);
  }
  if (!st) {
    int cap = n->num_in_edges > 0 ? n->num_in_edges : 1;
    int ocap = n->num_out_edges > 0 ? n->num_out_edges : 1;
    c->in_edges = rf__malloc(sizeof *c->in_edges * (size_t)cap);
    c->out_edges = rf__malloc(sizeof *c->out_edges * (size_t)ocap);
    c->cap_in_edges = cap;
    c->cap_out_edges = ocap;
    if (!c->in_edges || !c->out_edges) st = rf__oom();
  }
  rf__free(dt);
  rf__attrs_clear(&attrs);
  if (st) {
    rf__node_free(c);
    return st;
  }
  c->id = n->id;
  c->assigned_device = n->assigned_device;
  memcpy(c->out_shapes, n->out_shapes,
         sizeof *c->out_shapes * (size_t)n->num_outputs);
  *out = c;
  return NULL;
}

/* Copies every edge keeping the order of both in_edges and out_edges. */
static rf_status *copy_edges(const rf_graph *g, rf_graph *c) {
  int controls = 0;
  for (int i = 0; i < g->num_ids; i++)
    for (int k = 0; g->nodes[i] && k < g->nodes[i]->num_in_edges; k++)
      controls += g->nodes[i]->in_edges[k]->dst_in == RF_CONTROL_SLOT;
  edge_map map;
  if (edge_map_init(&map, controls)) return rf__oom();
  for (int i = 0; i < g->num_ids; i++) {
    const rf_node *n = g->nodes[i];
    if (!n) continue;
    rf_node *cn = c->nodes[i];
    for (int k = 0; k < n->num_in_edges; k++) {
      const rf__edge *e = n->in_edges[k];
      rf__edge *ce = edge_new(c->nodes[e->src->id], e->src_out, cn, e->dst_in);
      if (!ce) {
        rf__free(map.slots);
        return rf__oom(); /* edges already made are freed with the copy */
      }
      cn->in_edges[cn->num_in_edges++] = ce;
      if (e->dst_in != RF_CONTROL_SLOT)
        cn->data_in[e->dst_in] = ce;
      else
        edge_map_put(&map, e, ce);
    }
  }
  for (int i = 0; i < g->num_ids; i++) {
    const rf_node *n = g->nodes[i];
    if (!n) continue;
    rf_node *cn = c->nodes[i];
    for (int k = 0; k < n->num_out_edges; k++) {
      const rf__edge *e = n->out_edges[k];
      cn->out_edges[cn->num_out_edges++] =
          e->dst_in == RF_CONTROL_SLOT
              ? edge_map_get(&map, e)
              : c->nodes[e->dst->id]->data_in[e->dst_in];
    }
  }
  rf__free(map.slots);
  return NULL;
}

/* Nodes keep their ids, so the name index is copied whole. */
static rf_status *copy_nodes(const rf_graph *g, rf_graph *c) {
  c->nodes = rf__calloc((size_t)g->num_ids + 1, sizeof *c->nodes);
  RF_CHECK_ALLOC(c->nodes);
  c->cap_ids = g->num_ids + 1;
  c->num_ids = g->num_ids;
  for (int i = 0; i < g->num_ids; i++) {
    if (!g->nodes[i]) continue;
    RF_CHECK(copy_node(g->nodes[i], &c->nodes[i]));
    c->num_live++;
  }
  if (rf__name_index_copy(&c->names, &g->names)) return rf__oom();
  return NULL;
}

rf_status *rf__graph_copy(const rf_graph *g, rf_graph **out) {
  if (!g || !out) return rf__invalid("rf__graph_copy: NULL argument");
  rf_graph *c = rf_graph_new();
  RF_CHECK_ALLOC(c);
  memcpy(c->device_scope, g->device_scope, sizeof c->device_scope);
  c->device_depth = g->device_depth;
  c->name_counter = g->name_counter;
  rf_status *st = copy_nodes(g, c);
  if (!st) st = copy_edges(g, c);
  if (!st && g->error) {
    c->error = rf__status_copy(g->error);
    if (c->error == rf__oom() &&
        rf_status_code(g->error) != RF_RESOURCE_EXHAUSTED)
      st = rf__oom();
  }
  if (st) {
    rf_graph_free(c);
    return st;
  }
  *out = c;
  return NULL;
}
