/* grad/gradients.c - rf_gradients: reverse-mode differentiation by adding
 * gradient nodes to the graph (TensorFlow's gradients_impl, in C).
 *
 * Only nodes on a data path from some x to some y ("between" nodes) are
 * visited, in reverse topological order (Kahn counting over data edges), so
 * the work is linear in graph size. Every per-node array is indexed by the
 * node ids that existed on entry; gradient nodes get later ids and are never
 * visited. On error the gradient nodes already added stay in the graph, unused
 * by anything the caller holds (a session prunes them); dxs is left untouched.
 */
#include "ringflow/gradients.h"

#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "grad/peers.h"
#include "ops/collective_names.h"
#include "graph/graph.h"
#include "ops/op_registry.h"
#include "ops/op_families.h"
#include "ringflow/ops.h"

enum { MARK_FORWARD = 1, MARK_BETWEEN = 2 };

/* The gradient contributions reaching one node output, in arrival order. */
typedef struct contribs {
  rf_output *items;
  int n, cap;
} contribs;

typedef struct grad_state {
  rf_graph *g;
  int num_ids;         /* node ids on entry */
  unsigned char *mark; /* [num_ids] MARK_* bits */
  int *pending;        /* [num_ids] consumer edges not yet processed */
  int *queue;          /* [num_ids] BFS / ready queue of ids */
  int *out_base;       /* [num_ids + 1] first slot of each node's outputs */
  contribs *grads;     /* [out_base[num_ids]] */
  int max_in, max_out; /* over between nodes, for the scratch below */
  rf_output *dy, *dx;
  const rf_output **parts;
  int *num_parts;
  rf__peers *peers;     /* collective groups (grad/peers.h) */
  int64_t construction; /* names this call's collectives (collective_names.h) */
} grad_state;

static rf_node *node_at(const grad_state *s, int id) { return s->g->nodes[id]; }

static bool is_between(const grad_state *s, const rf_node *n) {
  return n->id < s->num_ids && (s->mark[n->id] & MARK_BETWEEN);
}

static const char *device_of(const rf_node *n) {
  return n->requested_device ? n->requested_device : "";
}

/* ---- argument checks ---- */

static rf_status *check_output(const rf_graph *g, rf_output o, const char *what,
                               int i) {
  if (!o.node)
    return rf__invalid("rf_gradients: %s[%d] is the invalid output", what, i);
  const rf_node *n = o.node;
  if (n->id < 0 || n->id >= g->num_ids || g->nodes[n->id] != n)
    return rf__invalid("rf_gradients: %s[%d] (node '%s') is not in this graph",
                       what, i, n->name);
  if (o.index < 0 || o.index >= n->num_outputs)
    return rf__invalid(
        "rf_gradients: %s[%d] asks for output %d of node '%s', which has %d",
        what, i, o.index, n->name, n->num_outputs);
  return NULL;
}

static bool shapes_compatible(const rf_shape *a, const rf_shape *b) {
  if (a->rank == RF_UNKNOWN_RANK || b->rank == RF_UNKNOWN_RANK) return true;
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] >= 0 && b->dims[d] >= 0 && a->dims[d] != b->dims[d])
      return false;
  return true;
}

static rf_status *check_grad_y(rf_output y, rf_output gy, int i) {
  rf_dtype yt = y.node->out_dtypes[y.index];
  rf_dtype gt = gy.node->out_dtypes[gy.index];
  if (yt != gt)
    return rf__invalid(
        "rf_gradients: grad_ys[%d] has dtype %s but ys[%d] "
        "(node '%s') has dtype %s",
        i, rf_dtype_name(gt), i, y.node->name, rf_dtype_name(yt));
  const rf_shape *ys = &y.node->out_shapes[y.index];
  const rf_shape *gs = &gy.node->out_shapes[gy.index];
  if (!shapes_compatible(ys, gs)) {
    char a[96], b[96];
    rf_shape_format(gs, a, sizeof a);
    rf_shape_format(ys, b, sizeof b);
    return rf__invalid(
        "rf_gradients: grad_ys[%d] has shape %s but ys[%d] "
        "(node '%s') has shape %s",
        i, a, i, y.node->name, b);
  }
  return NULL;
}

static rf_status *check_args(rf_graph *g, const rf_output *ys, int ny,
                             const rf_output *xs, int nx,
                             const rf_output *grad_ys, const rf_output *dxs) {
  if (!g) return rf__invalid("rf_gradients: graph is NULL");
  if (!ys || ny <= 0)
    return rf__invalid("rf_gradients: need at least one y (ys=%p, ny=%d)",
                       (const void *)ys, ny);
  if (!xs || nx <= 0)
    return rf__invalid("rf_gradients: need at least one x (xs=%p, nx=%d)",
                       (const void *)xs, nx);
  if (!dxs) return rf__invalid("rf_gradients: dxs is NULL");
  if (rf__graph_failed(g)) return rf_graph_status(g);
  for (int i = 0; i < ny; i++) RF_CHECK(check_output(g, ys[i], "ys", i));
  for (int i = 0; i < nx; i++) RF_CHECK(check_output(g, xs[i], "xs", i));
  if (grad_ys)
    for (int i = 0; i < ny; i++) {
      RF_CHECK(check_output(g, grad_ys[i], "grad_ys", i));
      RF_CHECK(check_grad_y(ys[i], grad_ys[i], i));
    }
  return NULL;
}

/* ---- state ---- */

static void state_free(grad_state *s) {
  rf__peers_free(s->peers);
  if (s->grads)
    for (int i = 0; i < s->out_base[s->num_ids]; i++)
      rf__free(s->grads[i].items);
  rf__free(s->grads);
  rf__free(s->mark);
  rf__free(s->pending);
  rf__free(s->queue);
  rf__free(s->out_base);
  rf__free(s->dy);
  rf__free(s->dx);
  rf__free(s->parts);
  rf__free(s->num_parts);
}

static rf_status *state_init(grad_state *s, rf_graph *g) {
  memset(s, 0, sizeof *s);
  s->g = g;
  s->num_ids = g->num_ids;
  size_t n = (size_t)s->num_ids + 1; /* +1: never a zero-sized request */
  s->mark = rf__calloc(n, 1);
  s->pending = rf__calloc(n, sizeof(int));
  s->queue = rf__malloc(n * sizeof(int));
  s->out_base = rf__malloc(n * sizeof(int));
  if (!s->mark || !s->pending || !s->queue || !s->out_base) return rf__oom();
  int total = 0;
  for (int id = 0; id < s->num_ids; id++) {
    s->out_base[id] = total;
    if (g->nodes[id]) total += g->nodes[id]->num_outputs;
  }
  s->out_base[s->num_ids] = total;
  s->grads = rf__calloc((size_t)total + 1, sizeof(contribs));
  return s->grads ? NULL : rf__oom();
}

static contribs *grads_of(grad_state *s, rf_node *n, int out) {
  return &s->grads[s->out_base[n->id] + out];
}

static rf_status *add_contrib(contribs *c, rf_output o) {
  if (rf__grow(&c->items, &c->cap, c->n + 1, sizeof(rf_output)) != 0)
    return rf__oom();
  c->items[c->n++] = o;
  return NULL;
}

/* ---- which nodes lie between xs and ys ---- */

/* Marks every node reachable from the xs' nodes over data edges. */
static void mark_forward(grad_state *s, const rf_output *xs, int nx) {
  int head = 0, tail = 0;
  for (int i = 0; i < nx; i++) {
    int id = xs[i].node->id;
    if (!(s->mark[id] & MARK_FORWARD)) {
      s->mark[id] |= MARK_FORWARD;
      s->queue[tail++] = id;
    }
  }
  while (head < tail) {
    rf_node *n = node_at(s, s->queue[head++]);
    /* A collective participant's peers depend on it too (grad/peers.h). */
    int np;
    const int *peers = rf__peers_of(s->peers, n->id, &np);
    for (int i = 0; i < np; i++)
      if (!(s->mark[peers[i]] & MARK_FORWARD)) {
        s->mark[peers[i]] |= MARK_FORWARD;
        s->queue[tail++] = peers[i];
      }
    for (int e = 0; e < n->num_out_edges; e++) {
      const rf__edge *edge = n->out_edges[e];
      if (edge->src_out == RF_CONTROL_SLOT) continue;
      int d = edge->dst->id;
      if (!(s->mark[d] & MARK_FORWARD)) {
        s->mark[d] |= MARK_FORWARD;
        s->queue[tail++] = d;
      }
    }
  }
}

/* Marks forward-reached nodes from which some y is reachable: walks data
 * inputs back from the ys, staying inside the forward set (anything upstream
 * of a forward node outside it cannot be downstream of an x). Returns how many
 * nodes are between. */
static int mark_between(grad_state *s, const rf_output *ys, int ny) {
  int head = 0, tail = 0;
  for (int i = 0; i < ny; i++) {
    int id = ys[i].node->id;
    if (s->mark[id] == MARK_FORWARD) {
      s->mark[id] |= MARK_BETWEEN;
      s->queue[tail++] = id;
    }
  }
  while (head < tail) {
    rf_node *n = node_at(s, s->queue[head++]);
    /* Every participant of a needed collective is needed: its gradient is
     * one participant of the gradient's collective. */
    int np;
    const int *peers = rf__peers_of(s->peers, n->id, &np);
    for (int i = 0; i < np; i++)
      if (s->mark[peers[i]] == MARK_FORWARD) {
        s->mark[peers[i]] |= MARK_BETWEEN;
        s->queue[tail++] = peers[i];
      }
    for (int k = 0; k < n->num_inputs; k++) {
      int src = n->data_in[k]->src->id;
      if (s->mark[src] == MARK_FORWARD) {
        s->mark[src] |= MARK_BETWEEN;
        s->queue[tail++] = src;
      }
    }
  }
  return tail;
}

/* pending[n] = data edges from n into between nodes; sizes the scratch. */
static rf_status *count_pending(grad_state *s) {
  for (int id = 0; id < s->num_ids; id++) {
    rf_node *n = node_at(s, id);
    if (!n || !(s->mark[id] & MARK_BETWEEN)) continue;
    if (n->num_inputs > s->max_in) s->max_in = n->num_inputs;
    if (n->num_outputs > s->max_out) s->max_out = n->num_outputs;
    for (int k = 0; k < n->num_inputs; k++) {
      rf_node *src = n->data_in[k]->src;
      if (is_between(s, src)) s->pending[src->id]++;
    }
  }
  size_t ni = (size_t)s->max_in + 1, no = (size_t)s->max_out + 1;
  s->dx = rf__malloc(ni * sizeof(rf_output));
  s->dy = rf__malloc(no * sizeof(rf_output));
  s->parts = rf__malloc(no * sizeof(rf_output *));
  s->num_parts = rf__malloc(no * sizeof(int));
  if (!s->dx || !s->dy || !s->parts || !s->num_parts) return rf__oom();
  return NULL;
}

/* ---- building gradient nodes ---- */

/* The graph's sticky error as a new status naming the node whose gradient
 * was being built, or NULL when the graph is fine. */
static rf_status *graph_error(rf_graph *g, const rf_node *n) {
  if (!rf__graph_failed(g)) return NULL;
  return rf__status_prefix(rf_graph_status(g),
                           "building the gradient of node '%s' (op '%s')",
                           n->name, n->op->name);
}

/* Replaces several contributions to output `out` of n by their AddN. The
 * caller has pushed n's device. */
static rf_status *sum_contribs(grad_state *s, rf_node *n, int out) {
  contribs *c = grads_of(s, n, out);
  if (c->n <= 1) return NULL;
  rf_output sum = rf_add_n(s->g, NULL, c->items, c->n);
  RF_CHECK(graph_error(s->g, n));
  c->items[0] = sum;
  c->n = 1;
  return NULL;
}

/* Seeds each y reaching back to an x with grad_ys[i] or OnesLike(y). */
static rf_status *seed_ys(grad_state *s, const rf_output *ys, int ny,
                          const rf_output *grad_ys) {
  for (int i = 0; i < ny; i++) {
    rf_node *n = ys[i].node;
    if (!is_between(s, n)) continue;
    if (n->out_dtypes[ys[i].index] == RF_BOOL) continue; /* no gradient */
    rf_output seed = grad_ys ? grad_ys[i] : (rf_output){NULL, 0};
    if (!grad_ys) {
      RF_CHECK(rf_graph_push_device(s->g, device_of(n)));
      seed = rf_ones_like(s->g, NULL, ys[i]);
      rf_graph_pop_device(s->g);
      RF_CHECK(graph_error(s->g, n));
    }
    RF_CHECK(add_contrib(grads_of(s, n, ys[i].index), seed));
  }
  return NULL;
}

/* Runs n's gradient function with its device as the scope. */
static rf_status *call_grad_fn(grad_state *s, rf_node *n) {
  const rf__op_def *op = n->op;
  bool unsummed = (op->flags & RF_OP_GRAD_UNSUMMED) != 0;
  rf__grad_ctx c = {
      .g = s->g, .op = n, .dx = s->dx, .construction = s->construction};
  RF_CHECK(rf_graph_push_device(s->g, device_of(n)));
  rf_status *st = NULL;
  int np;
  rf__peers_of(s->peers, n->id, &np);
  for (int o = 0; o < n->num_outputs; o++) {
    contribs *cl = grads_of(s, n, o);
    if (np && cl->n == 0) { /* a participant still takes part, with zeros */
      c.dy_is_filler = true;
      rf_output zeros = rf_zeros_like(s->g, NULL, (rf_output){n, o});
      RF_CHECK_GOTO(graph_error(s->g, n), st, done);
      RF_CHECK_GOTO(add_contrib(cl, zeros), st, done);
    }
    if (!unsummed) RF_CHECK_GOTO(sum_contribs(s, n, o), st, done);
    s->dy[o] = cl->n ? cl->items[0] : (rf_output){NULL, 0};
    s->parts[o] = cl->items;
    s->num_parts[o] = cl->n;
  }
  for (int k = 0; k < n->num_inputs; k++) s->dx[k] = (rf_output){NULL, 0};
  if (unsummed) {
    c.dy_parts = s->parts;
    c.num_dy_parts = s->num_parts;
  } else {
    c.dy = s->dy;
  }
  st = op->grad(&c);
  /* The graph's error came first: a later failure is often only its echo
   * (an invalid output fed to the next node). */
  if (rf__graph_failed(s->g)) {
    rf_status_free(st);
    st = graph_error(s->g, n);
  } else if (st) {
    st = rf__status_prefix(st, "building the gradient of node '%s' (op '%s')",
                           n->name, op->name);
  }
done:
  rf_graph_pop_device(s->g);
  return st;
}

/* Checks the gradient for input k of n matches that input (TF's set_shape
 * check): a wrong one is a bug in the op's gradient function. */
static rf_status *check_dx(const rf_node *n, int k, rf_output dx) {
  rf_output in = rf__input(n, k);
  if (dx.index < 0 || dx.index >= dx.node->num_outputs)
    return rf__internal(
        "The gradient of node '%s' (op '%s') for its input %d "
        "names output %d of node '%s', which has %d",
        n->name, n->op->name, k, dx.index, dx.node->name, dx.node->num_outputs);
  rf_dtype want = in.node->out_dtypes[in.index];
  if (want == RF_RESOURCE) return NULL; /* variables take their value's grad */
  rf_dtype got = dx.node->out_dtypes[dx.index];
  const rf_shape *ws = &in.node->out_shapes[in.index];
  const rf_shape *gs = &dx.node->out_shapes[dx.index];
  if (got == want && shapes_compatible(ws, gs)) return NULL;
  char a[96], b[96];
  rf_shape_format(gs, a, sizeof a);
  rf_shape_format(ws, b, sizeof b);
  return rf__internal(
      "The gradient of node '%s' (op '%s') for its input %d is %s %s, but the "
      "input is %s %s",
      n->name, n->op->name, k, rf_dtype_name(got), a, rf_dtype_name(want), b);
}

static bool has_out_grads(grad_state *s, rf_node *n) {
  for (int o = 0; o < n->num_outputs; o++)
    if (grads_of(s, n, o)->n) return true;
  return false;
}

static bool has_between_input(grad_state *s, const rf_node *n) {
  for (int k = 0; k < n->num_inputs; k++)
    if (is_between(s, n->data_in[k]->src)) return true;
  return false;
}

/* Builds n's gradient (when something flows in and something can flow out)
 * and hands the input gradients to its between producers. Only an x's node
 * can lack a between input, and its gradient function is then not needed. */
static rf_status *backprop_node(grad_state *s, rf_node *n) {
  int np;
  rf__peers_of(s->peers, n->id, &np);
  if (!np && (!has_out_grads(s, n) || !has_between_input(s, n))) return NULL;
  if (n->op->flags & RF_OP_NO_GRADIENT) return NULL;
  if (!n->op->grad)
    return rf__error(RF_NOT_FOUND,
                     "No gradient defined for op '%s' (node '%s')", n->op->name,
                     n->name);
  RF_CHECK(call_grad_fn(s, n));
  for (int k = 0; k < n->num_inputs; k++) {
    rf_output dx = s->dx[k];
    rf__edge *e = n->data_in[k];
    if (!dx.node || !is_between(s, e->src)) continue;
    /* bool tensors carry no gradient (nothing sums them: AddN, _TileGrad
     * and _SumToShapeOf refuse bool), as in TensorFlow */
    if (e->src->out_dtypes[e->src_out] == RF_BOOL) continue;
    RF_CHECK(check_dx(n, k, dx));
    RF_CHECK(add_contrib(grads_of(s, e->src, e->src_out), dx));
  }
  return NULL;
}

/* Visits between nodes consumers-first (Kahn over data edges). */
static rf_status *backprop_all(grad_state *s, int num_between) {
  int head = 0, tail = 0;
  for (int id = 0; id < s->num_ids; id++)
    if ((s->mark[id] & MARK_BETWEEN) && s->pending[id] == 0)
      s->queue[tail++] = id;
  while (head < tail) {
    rf_node *n = node_at(s, s->queue[head++]);
    RF_CHECK(backprop_node(s, n));
    for (int k = 0; k < n->num_inputs; k++) {
      rf_node *src = n->data_in[k]->src;
      if (is_between(s, src) && --s->pending[src->id] == 0)
        s->queue[tail++] = src->id;
    }
  }
  if (tail == num_between) return NULL;
  for (int id = 0; id < s->num_ids; id++)
    if ((s->mark[id] & MARK_BETWEEN) && s->pending[id] > 0)
      return rf__invalid("rf_gradients: a cycle runs through node '%s'",
                         node_at(s, id)->name);
  return rf__internal("rf_gradients: lost track of between nodes");
}

/* dx = sum of what reached x; summed in place so a repeated x gets the same
 * output. */
static rf_status *collect_dx(grad_state *s, rf_output x, rf_output *dx) {
  *dx = (rf_output){NULL, 0};
  if (!is_between(s, x.node)) return NULL;
  contribs *c = grads_of(s, x.node, x.index);
  if (c->n > 1) {
    RF_CHECK(rf_graph_push_device(s->g, device_of(x.node)));
    rf_status *st = sum_contribs(s, x.node, x.index);
    rf_graph_pop_device(s->g);
    RF_CHECK(st);
  }
  if (c->n) *dx = c->items[0];
  return NULL;
}

static rf_status *gradients(grad_state *s, const rf_output *ys, int ny,
                            const rf_output *xs, int nx,
                            const rf_output *grad_ys, rf_output *result) {
  RF_CHECK(rf__peers_build(s->g, s->num_ids, &s->peers));
  s->construction = rf__grad_next_construction(s->g);
  mark_forward(s, xs, nx);
  int num_between = mark_between(s, ys, ny);
  RF_CHECK(count_pending(s));
  RF_CHECK(seed_ys(s, ys, ny, grad_ys));
  RF_CHECK(backprop_all(s, num_between));
  for (int i = 0; i < nx; i++) RF_CHECK(collect_dx(s, xs[i], &result[i]));
  return NULL;
}

rf_status *rf_gradients(rf_graph *g, const rf_output *ys, int ny,
                        const rf_output *xs, int nx, const rf_output *grad_ys,
                        rf_output *dxs) {
  RF_CHECK(check_args(g, ys, ny, xs, nx, grad_ys, dxs));
  RF_CHECK(rf__ops_init());
  /* Gradient nodes take their forward node's device whatever the caller's
   * scope, one pushed at a time: the caller's stack is set aside, so that
   * one already RF_MAX_DEVICE_SCOPE deep does not refuse them. */
  char scope[RF_MAX_DEVICE_SCOPE][RF_DEVICE_NAME_MAX];
  int depth = g->device_depth;
  memcpy(scope, g->device_scope, sizeof scope);
  g->device_depth = 0;
  grad_state s;
  rf_status *st = state_init(&s, g);
  rf_output *result = NULL;
  if (!st) {
    result = rf__malloc((size_t)nx * sizeof(rf_output));
    if (!result) st = rf__oom();
  }
  if (!st) st = gradients(&s, ys, ny, xs, nx, grad_ys, result);
  if (!st) memcpy(dxs, result, (size_t)nx * sizeof(rf_output));
  /* The graph held no error on entry (check_args): one a builder recorded
   * here is the returned status's; the graph stays usable, as after a
   * NOT_FOUND, with the nodes already added left unused. */
  if (st && rf__graph_failed(g)) rf_graph_clear_status(g);
  memcpy(g->device_scope, scope, sizeof scope);
  g->device_depth = depth;
  rf__free(result);
  state_free(&s);
  return st;
}
