/* passes/group_updates.c - the POST_PLACEMENT pass that turns the optimizer
 * updates of a step into multi-tensor updates (docs/PERFORMANCE.md,
 * "Multi-tensor optimizer updates"): ApplyAdam, ApplyAdamW and ApplyMomentum
 * nodes of one op, dtype and device that read the same scalar inputs (one
 * node's output, or Consts of one value) and use_nesterov become one
 * _MultiApplyAdam / _MultiApplyAdamW / _MultiApplyMomentum, which updates every
 * tensor in one kernel (one launch on a GPU) with the element loops of the
 * single op, so the results are bit-identical; AssignMuls (Adam's beta powers
 * in `ringflow train`) likewise become one _MultiAssignMul whose output i is
 * member i's new value. Only updates whose handles come
 * straight from Variable nodes of their own device join (distinct variables,
 * handles in host memory), and a group grows only by an update that no path
 * joins to it in the graph where every group made so far is one vertex, so
 * grouping never makes a cycle. The update stays all or nothing: every variable
 * of the group is updated or none (kernels/state_prepare.h). */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "kernels/state_prepare.h"
#include "ops/op_registry.h"
#include "passes/node_match.h"
#include "passes/node_merge.h"
#include "passes/pass_registry.h"

/* The ops grouped: each op's handle count and the op it becomes. */
static const struct {
  const char *op, *multi;
  const rf__state_update_spec *spec;
} kinds[] = {
    {"ApplyAdam", "_MultiApplyAdam", &rf__state_adam_spec},
    {"ApplyAdamW", "_MultiApplyAdamW", &rf__state_adamw_spec},
    {"ApplyMomentum", "_MultiApplyMomentum", &rf__state_momentum_spec},
    {"AssignMul", "_MultiAssignMul", &rf__state_assign_mul_spec},
};
#define NUM_KINDS ((int)(sizeof kinds / sizeof *kinds))

typedef struct group_ctx {
  rf__pass_ctx *pc;
  rf_graph *g;
  int *group; /* per node id: its group (the first member's id), or -1 */
  int *next;  /* per node id: the next member of its group, or -1 */
  int *last;  /* per group id: its last member */
  int *count; /* per group id: its members */
  int *kind;  /* per node id: its kinds[] index, or -1 */
  int *seen;  /* visit stamps */
  int *stack; /* node ids */
  int stamp;
} group_ctx;

/* The kinds[] index of n when it may be grouped, else -1: an update on a
 * device of this process whose handles come from Variable nodes there. */
static int kind_of(const group_ctx *c, const rf_node *n) {
  int d = n->assigned_device;
  if (d < 0 || d >= c->pc->num_devices || c->pc->devices[d].remote) return -1;
  for (int k = 0; k < NUM_KINDS; k++) {
    if (strcmp(n->op->name, kinds[k].op) != 0) continue;
    for (int i = 0; i < n->num_inputs; i++)
      if (!n->data_in[i]) return -1;
    for (int j = 0; j < kinds[k].spec->nvars; j++) {
      const rf_node *v = n->data_in[j]->src;
      if (strcmp(v->op->name, "Variable") != 0 || v->assigned_device != d)
        return -1;
    }
    return k;
  }
  return -1;
}

/* An attr's value as a number (types, bools), or -1 when it is missing. */
static int64_t attr_number(const rf_node *n, const char *name) {
  const rf__attr_value *v = rf__attrs_find(&n->attrs, name);
  if (!v) return -1;
  return v->type == RF_ATTR_TYPE   ? (int64_t)v->u.type
         : v->type == RF_ATTR_BOOL ? (int64_t)v->u.b
                                   : -2;
}

/* Whether x and y are Const nodes of one value, bit for bit (a model
 * builder's scalar(g, beta1) per update: the same hyper-parameter). */
static bool same_const(const rf_node *x, const rf_node *y) {
  const rf_tensor *a = rf__node_const_value(x), *b = rf__node_const_value(y);
  return a && b && a->dtype == b->dtype &&
         rf_shape_equal(&a->shape, &b->shape) && a->nbytes == b->nbytes &&
         memcmp(a->data, b->data, a->nbytes) == 0;
}

/* Whether a and b (updates of one kind) may share a node: same device,
 * dtype (AssignMul's attr is "dtype"), use_nesterov and scalar inputs. */
static bool same_key(const rf_node *a, const rf_node *b,
                     const rf__state_update_spec *spec) {
  if (a->assigned_device != b->assigned_device ||
      attr_number(a, "T") != attr_number(b, "T") ||
      attr_number(a, "dtype") != attr_number(b, "dtype") ||
      attr_number(a, "use_nesterov") != attr_number(b, "use_nesterov"))
    return false;
  for (int k = 0; k < spec->nscalars; k++) {
    const rf__edge *x = a->data_in[spec->scalar_inputs[k]];
    const rf__edge *y = b->data_in[spec->scalar_inputs[k]];
    if ((x->src != y->src || x->src_out != y->src_out) &&
        !same_const(x->src, y->src))
      return false;
  }
  return true;
}

/* Pushes node id x, and every member of its group, unless seen. */
static void push(group_ctx *c, int x, int *top) {
  bool grouped = c->group[x] >= 0;
  for (int y = grouped ? c->group[x] : x; y >= 0;
       y = grouped ? c->next[y] : -1) {
    if (c->seen[y] == c->stamp) continue;
    c->seen[y] = c->stamp;
    c->stack[(*top)++] = y;
  }
}

/* Whether a path through data and control edges leads from group `from`
 * to node `to` (forward) or from `to` to it (backward), groups contracted. */
static bool reaches(group_ctx *c, int from, int to, bool forward) {
  int top = 0;
  c->stamp++;
  push(c, from, &top);
  while (top > 0) {
    const rf_node *v = c->g->nodes[c->stack[--top]];
    int ne = forward ? v->num_out_edges : v->num_in_edges;
    for (int k = 0; k < ne; k++) {
      const rf_node *w = forward ? v->out_edges[k]->dst : v->in_edges[k]->src;
      if (w->id == to) return true;
      push(c, w->id, &top);
    }
  }
  return false;
}

/* Whether update x names a variable (a Variable node) that a member of
 * `group` names too: one node updates each variable once. */
static bool shares_variable(const group_ctx *c, int group, const rf_node *x,
                            const rf__state_update_spec *spec) {
  for (int y = group; y >= 0; y = c->next[y]) {
    const rf_node *m = c->g->nodes[y];
    for (int j = 0; j < spec->nvars; j++)
      for (int k = 0; k < spec->nvars; k++)
        if (m->data_in[j]->src == x->data_in[k]->src) return true;
  }
  return false;
}

static void join(group_ctx *c, int group, int x) {
  c->group[x] = group;
  c->next[c->last[group]] = x;
  c->last[group] = x;
  c->count[group]++;
}

/* Greedy, in topological order: an update joins the open group of its key
 * when the group has room and no path joins them, else opens the next. */
static rf_status *assign(group_ctx *c, rf_node **order, int n) {
  int *open = rf__malloc(sizeof *open * (size_t)(n ? n : 1)), nopen = 0;
  RF_CHECK_ALLOC(open);
  for (int p = 0; p < n; p++) {
    rf_node *x = order[p];
    int k = c->kind[x->id];
    if (k < 0) continue;
    int j = 0;
    while (j < nopen && (c->kind[open[j]] != k ||
                         !same_key(c->g->nodes[open[j]], x, kinds[k].spec)))
      j++;
    int gid = j < nopen ? open[j] : -1;
    if (gid >= 0 && c->count[gid] < RF_STATE_MAX_TENSORS &&
        !shares_variable(c, gid, x, kinds[k].spec) &&
        !reaches(c, gid, x->id, true) && !reaches(c, gid, x->id, false)) {
      join(c, gid, x->id);
      continue;
    }
    c->group[x->id] = x->id, c->last[x->id] = x->id, c->count[x->id] = 1;
    if (j == nopen) nopen++;
    open[j] = x->id;
  }
  rf__free(open);
  return NULL;
}

/* Points member m's readers at output `out` of `to` (AssignMul's new
 * value; the Apply* updates have no outputs), moves its control edges onto
 * `to`, then removes m. */
static rf_status *replace(group_ctx *c, rf_node *m, rf_node *to, int out) {
  if (m->num_outputs > 0) RF_CHECK(rf__merge_redirect(c->g, m, 0, to, out));
  for (int i = 0; i < m->num_in_edges; i++) {
    const rf__edge *e = m->in_edges[i];
    if (e->dst_in == RF_CONTROL_SLOT && !rf__graph_has_control_edge(e->src, to))
      RF_CHECK(rf__graph_add_edge(c->g, e->src, RF_CONTROL_SLOT, to,
                                  RF_CONTROL_SLOT));
  }
  for (int i = 0; i < m->num_out_edges; i++) {
    rf_node *dst = m->out_edges[i]->dst;
    if (!rf__graph_has_control_edge(to, dst))
      RF_CHECK(
          rf__graph_add_edge(c->g, to, RF_CONTROL_SLOT, dst, RF_CONTROL_SLOT));
  }
  rf__graph_remove_node(c->g, m);
  return NULL;
}

/* A float64 -> float32 Cast on the update's device, of no control inputs,
 * feeding update m0's input j, or NULL. */
static rf_node *f64_cast(const rf_node *m0, int j) {
  const rf__edge *e = m0->data_in[j];
  rf_node *c = e->src;
  if (!rf__node_is(c, "Cast") || e->src_out != 0 || c->num_inputs != 1 ||
      !c->data_in[0] || c->num_in_edges != 1 ||
      c->assigned_device != m0->assigned_device ||
      c->out_dtypes[0] != RF_FLOAT32)
    return NULL;
  const rf__edge *x = c->data_in[0];
  return x->src->out_dtypes[x->src_out] == RF_FLOAT64 ? c : NULL;
}

/* Adam's and AdamW's float32 updates whose beta powers are both Casts of
 * float64 values (ringflow train's MLP keeps them in float64 variables):
 * the node reads the float64 values (Tpower float64; the kernels round
 * them to float32 as the Casts did, kernels/state_prepare.h), and the
 * Casts, two kernels a step, go once nothing else reads them. casts[0,2)
 * get the Casts, or NULL. */
static bool f64_powers(const rf_node *m0, const rf__state_update_spec *spec,
                       rf_node **casts) {
  casts[0] = casts[1] = NULL;
  if ((spec != &rf__state_adam_spec && spec != &rf__state_adamw_spec) ||
      attr_number(m0, "T") != RF_FLOAT32)
    return false;
  casts[0] = f64_cast(m0, 3);
  casts[1] = f64_cast(m0, 4);
  if (casts[0] && casts[1]) return true;
  casts[0] = casts[1] = NULL;
  return false;
}

/* The node of group `gid` (members m[0, n)): the handle lists, the first
 * member's scalars, the gradient list, in the op's input order. */
static rf_status *rewrite(group_ctx *c, rf_node **m, int n) {
  const rf__state_update_spec *spec = kinds[c->kind[m[0]->id]].spec;
  const char *op_name = kinds[c->kind[m[0]->id]].multi;
  const rf__op_def *op = rf__op_find(op_name);
  if (!op) return rf__internal("op %s is not registered", op_name);
  int nin = (spec->nvars + 1) * n + spec->nscalars;
  rf_output *in = rf__malloc(sizeof *in * (size_t)nin);
  size_t len = strlen(m[0]->name) + strlen(op_name) + 32;
  char *mem = rf__malloc(2 * len), *stem = mem, *name = mem + len;
  rf__attrs a = {0};
  rf_node *node = NULL;
  rf_status *st = in && mem ? NULL : rf__oom();
  for (int j = 0; !st && j < m[0]->num_inputs; j++)
    for (int i = 0; i < n; i++) {
      bool list = j < spec->nvars || j == spec->grad;
      if (!list && i > 0) break;
      in[rf__state_input(spec, n, j, i)] = rf__input(m[list ? i : 0], j);
    }
  rf_node *casts[2];
  bool f64 = f64_powers(m[0], spec, casts);
  for (int k = 0; f64 && !st && k < 2; k++)
    in[rf__state_input(spec, n, 3 + k, 0)] = rf__input(casts[k], 0);
  if (!st) st = rf__attrs_copy(&m[0]->attrs, &a);
  rf__attr_value nv = rf__attr_int(n);
  if (!st) st = rf__attrs_set(&a, "N", &nv);
  if (!st && (spec == &rf__state_adam_spec || spec == &rf__state_adamw_spec)) {
    rf__attr_value tp =
        f64 ? rf__attr_type_value(RF_FLOAT64)
            : rf__attr_type_value((rf_dtype)attr_number(m[0], "T"));
    st = rf__attrs_set(&a, "Tpower", &tp);
  }
  if (!st) {
    snprintf(stem, len, "%s/%s", m[0]->name, op_name);
    rf__graph_unique_name(c->g, stem, name, len);
    int d = m[0]->assigned_device;
    st = rf__graph_add_node(c->g, op, name, c->pc->devices[d].canonical, in,
                            nin, &a, &node);
    if (!st) node->assigned_device = d;
    for (int i = 0; !st && i < n && m[i]->num_outputs > 0; i++)
      node->out_shapes[i] = m[i]->out_shapes[0]; /* AssignMul's new values */
  }
  rf__attrs_clear(&a);
  rf__free(in);
  rf__free(mem);
  RF_CHECK(st);
  RF__LOG(
      RF_LOG_INFO, "compile %ld: %d %s updates (%s) on %s as one %s '%.200s'",
      c->pc->compile, n, kinds[c->kind[m[0]->id]].op,
      rf_dtype_name(m[0]->data_in[spec->grad]
                        ->src->out_dtypes[m[0]->data_in[spec->grad]->src_out]),
      c->pc->devices[node->assigned_device].canonical, op_name, node->name);
  for (int i = 0; i < n; i++) RF_CHECK(replace(c, m[i], node, i));
  for (int k = 0; f64 && k < 2; k++) {
    if (k == 1 && casts[1] == casts[0]) break;
    if (casts[k]->num_out_edges > 0) continue; /* read elsewhere too */
    RF__LOG(RF_LOG_DEBUG,
            "compile %ld: Cast '%.200s' removed: '%.200s' reads its float64 "
            "input",
            c->pc->compile, casts[k]->name, node->name);
    rf__graph_remove_node(c->g, casts[k]);
  }
  return NULL;
}

static rf_status *run(group_ctx *c) {
  rf_graph *g = c->g;
  rf_node **order = NULL, *members[RF_STATE_MAX_TENSORS];
  int norder = 0, ngroups = 0;
  for (int i = 0; i < g->num_ids; i++) {
    c->group[i] = c->next[i] = -1;
    c->kind[i] = g->nodes[i] ? kind_of(c, g->nodes[i]) : -1;
  }
  RF_CHECK(rf__topological_order(g, &order, &norder));
  rf_status *st = assign(c, order, norder);
  /* Groups in the order of their first member, listed before rewriting
   * removes nodes of `order` (into its own memory: the stack is free). */
  for (int p = 0; !st && p < norder; p++) {
    int gid = order[p]->id;
    if (c->group[gid] == gid && c->count[gid] > 1) c->stack[ngroups++] = gid;
  }
  rf__free(order);
  for (int k = 0; !st && k < ngroups; k++) {
    int n = 0;
    for (int y = c->stack[k]; y >= 0; y = c->next[y])
      members[n++] = g->nodes[y];
    st = rewrite(c, members, n);
  }
  return st;
}

rf_status *rf__group_updates(rf__pass_ctx *ctx) {
  if (!ctx->group_updates) return NULL;
  rf_graph *g = ctx->graph;
  group_ctx c = {.pc = ctx, .g = g};
  size_t ids = (size_t)g->num_ids + 1;
  int *mem = rf__calloc(7 * ids, sizeof *mem);
  if (!mem) return rf__status_prefix(rf__oom(), "grouping optimizer updates");
  c.group = mem, c.next = mem + ids, c.last = mem + 2 * ids;
  c.count = mem + 3 * ids, c.kind = mem + 4 * ids, c.seen = mem + 5 * ids;
  c.stack = mem + 6 * ids;
  rf_status *st = run(&c);
  rf__free(mem);
  return st ? rf__status_prefix(st, "grouping optimizer updates") : NULL;
}
