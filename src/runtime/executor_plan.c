/* runtime/executor_plan.c - builds the per-device plans of a partitioned
 * graph (linear: every node and edge is visited a constant number of times),
 * initialises kernels once per node, and caches step frames. */
#include <string.h>

#include "core/mem.h"
#include "ops/op_registry.h"
#include "runtime/executor_internal.h"

/* Per-compile scratch indexed by graph node id. */
typedef struct builder {
  const rf_graph *g;
  rf__device *devices;
  int num_devices;
  int *local;     /* [num_ids]: local id on its device */
  int *in_base;   /* [num_ids] */
  int *counts;    /* [num_devices]: nodes */
  char *seen_out; /* [max outputs]: scratch for `take` marking */
  int max_out;
} builder;

/* A frame and its arrays (tensors in them already released). */
static void frame_free(frame *f) {
  rf__free(f->slots);
  rf__free(f->outs);
  rf__free(f->pending);
  rf__free(f->actx);
  rf__free(f->refs);
  rf__free(f->handoff);
  rf__free(f->batches);
  rf__free(f->bucket_tensors);
  rf__free(f);
}

static void plan_destroy(dplan *p) {
  for (int i = 0; p->nodes && i < p->num_nodes; i++) {
    xnode *x = &p->nodes[i];
    if (x->state && x->kernel && x->kernel->destroy)
      x->kernel->destroy(x->state);
  }
  while (p->free_frames) {
    frame *f = p->free_frames;
    p->free_frames = f->next;
    frame_free(f);
  }
  pthread_mutex_destroy(&p->frames_mu);
  rf__free(p->buckets);
  rf__free(p->homes);
  rf__free(p->nodes);
  rf__free(p->edges);
  rf__free(p->ctl);
  rf__free(p->drops);
  rf__free(p->roots);
}

void rf__executor_free(rf__executor *x) {
  if (!x) return;
  for (int i = 0; i < x->num_plans; i++) plan_destroy(&x->plans[i]);
  rf__free(x->plans);
  rf__free(x);
}

int rf__executor_num_nodes(const rf__executor *x) {
  int n = 0;
  for (int i = 0; i < x->num_plans; i++) n += x->plans[i].num_nodes;
  return n;
}

int rf__executor_num_devices(const rf__executor *x) { return x->num_plans; }

rf__device *rf__executor_device(const rf__executor *x, int i) {
  return x->plans[i].device;
}

/* Finds v's kernel and runs its init. */
static rf_status *bind_kernel(dplan *p, xnode *x) {
  const rf_node *v = x->node;
  const rf__kernel_def *k = rf__kernel_find(v->op->name, p->device->name.type);
  if (!k)
    return rf__error(RF_NOT_FOUND,
                     "node '%s' (%s): no kernel for op %s is "
                     "registered for device %s",
                     v->name, v->op->name, v->op->name, p->device->canonical);
  if (!k->compute == !k->compute_async)
    return rf__internal(
        "node '%s' (%s): the %s kernel must have exactly one "
        "of compute and compute_async",
        v->name, v->op->name, rf__device_type_name(k->device_type));
  x->kernel = k;
  x->compute = k->compute;
  x->cost = k->cost;
  if (k->init) {
    rf_status *st = k->init(v, &x->state);
    if (st)
      return rf__status_prefix(st, "node '%s' (%s) on %s", v->name, v->op->name,
                               p->device->canonical);
  }
  return NULL;
}

/* Sizes: first pass over the device's nodes (given in id order). */
static rf_status *size_plan(builder *b, dplan *p, rf_node **nodes, int n) {
  int slots = 0, outs = 0, edges = 0, ctl = 0, drops = 0;
  for (int i = 0; i < n; i++) {
    rf_node *v = nodes[i];
    b->in_base[v->id] = slots;
    slots += v->num_inputs;
    outs += v->num_outputs;
    drops += v->num_outputs; /* upper bound */
    for (int k = 0; k < v->num_out_edges; k++) {
      if (v->out_edges[k]->src_out == RF_CONTROL_SLOT)
        ctl++;
      else
        edges++;
    }
  }
  p->num_slots = slots;
  p->num_outs = outs;
  p->nodes = rf__calloc((size_t)n, sizeof(xnode));
  p->edges = rf__malloc(sizeof(xedge) * (size_t)(edges ? edges : 1));
  p->ctl = rf__malloc(sizeof(int) * (size_t)(ctl ? ctl : 1));
  p->drops = rf__malloc(sizeof(int) * (size_t)(drops ? drops : 1));
  p->roots = rf__malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!p->nodes || !p->edges || !p->ctl || !p->drops || !p->roots)
    return rf__oom();
  p->num_nodes = n; /* only now: plan_destroy walks nodes[0..num_nodes) */
  return NULL;
}

/* Fills v's out edges, marking each output's last consumer and listing the
 * unconsumed outputs. */
static void fill_edges(builder *b, dplan *p, const rf_node *v, xnode *x,
                       int *ne, int *nc, int *nd) {
  x->edge_begin = *ne;
  x->ctl_begin = *nc;
  for (int k = 0; k < v->num_out_edges; k++) {
    const rf__edge *e = v->out_edges[k];
    int dst = b->local[e->dst->id];
    if (e->src_out == RF_CONTROL_SLOT) {
      p->ctl[(*nc)++] = dst;
    } else {
      p->edges[(*ne)++] =
          (xedge){e->src_out, dst, b->in_base[e->dst->id] + e->dst_in, 0};
    }
  }
  x->edge_end = *ne;
  x->ctl_end = *nc;
  for (int k = x->edge_end - 1; k >= x->edge_begin; k--) {
    xedge *e = &p->edges[k];
    if (!b->seen_out[e->src_out]) {
      b->seen_out[e->src_out] = 1;
      e->take = 1;
    }
  }
  x->drop_begin = *nd;
  for (int o = 0; o < v->num_outputs; o++) {
    if (!b->seen_out[o]) p->drops[(*nd)++] = o;
    b->seen_out[o] = 0;
  }
  x->drop_end = *nd;
}

static rf_status *build_plan(builder *b, dplan *p, rf__device *dev,
                             rf_node **nodes, int n) {
  p->device = dev;
  pthread_mutex_init(&p->frames_mu, NULL);
  RF_CHECK(size_plan(b, p, nodes, n));
  int ne = 0, nc = 0, nd = 0, outs = 0;
  for (int i = 0; i < n; i++) {
    rf_node *v = nodes[i];
    xnode *x = &p->nodes[i];
    x->node = v;
    x->in_base = b->in_base[v->id];
    x->num_in = v->num_inputs;
    x->out_base = outs;
    x->num_out = v->num_outputs;
    outs += v->num_outputs;
    x->init_pending = v->num_in_edges;
    if (x->init_pending == 0) p->roots[p->num_roots++] = i;
    fill_edges(b, p, v, x, &ne, &nc, &nd);
    RF_CHECK(bind_kernel(p, x));
    x->async_index = x->compute ? -1 : p->num_async++;
  }
  return rf__plan_homes(p);
}

/* Groups live nodes by device in id order; checks no edge crosses devices. */
static rf_status *group_nodes(builder *b, rf_node **by_dev, int *start) {
  const rf_graph *g = b->g;
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *v = g->nodes[i];
    if (!v) continue;
    int d = v->assigned_device;
    if (d < 0 || d >= b->num_devices)
      return rf__internal("node '%s' (%s) has no device after placement",
                          v->name, v->op->name);
    for (int k = 0; k < v->num_out_edges; k++) {
      const rf_node *w = v->out_edges[k]->dst;
      if (w->assigned_device != d)
        return rf__internal(
            "edge '%s' (on %s) -> '%s' (on %s) crosses "
            "devices after partitioning",
            v->name, b->devices[d].canonical, w->name,
            b->devices[w->assigned_device].canonical);
    }
    if (v->num_outputs > b->max_out) b->max_out = v->num_outputs;
    b->local[i] = b->counts[d]++;
  }
  for (int d = 0; d < b->num_devices; d++)
    start[d + 1] = start[d] + b->counts[d];
  for (int d = 0; d < b->num_devices; d++) b->counts[d] = 0;
  for (int i = 0; i < g->num_ids; i++) {
    rf_node *v = g->nodes[i];
    if (!v) continue;
    int d = v->assigned_device;
    by_dev[start[d] + b->counts[d]++] = v;
  }
  return NULL;
}

static rf_status *build_all(builder *b, rf__executor *x) {
  int ids = b->g->num_ids ? b->g->num_ids : 1;
  int nd = b->num_devices;
  rf_node **by_dev = rf__malloc(sizeof(rf_node *) * (size_t)ids);
  int *start = rf__calloc((size_t)nd + 1, sizeof(int));
  rf_status *st = NULL;
  if (!by_dev || !start) {
    st = rf__oom();
    goto done;
  }
  RF_CHECK_GOTO(group_nodes(b, by_dev, start), st, done);
  b->seen_out = rf__calloc((size_t)(b->max_out ? b->max_out : 1), 1);
  x->plans = rf__calloc((size_t)nd, sizeof(dplan));
  if (!b->seen_out || !x->plans) {
    st = rf__oom();
    goto done;
  }
  for (int d = 0; d < nd; d++) {
    int n = start[d + 1] - start[d];
    if (n == 0) continue;
    dplan *p = &x->plans[x->num_plans++];
    RF_CHECK_GOTO(build_plan(b, p, &b->devices[d], by_dev + start[d], n), st,
                  done);
  }
done:
  rf__free(by_dev);
  rf__free(start);
  return st;
}

rf_status *rf__executor_new(const rf_graph *g, rf__device *devices,
                            int num_devices, rf__executor **out) {
  builder b = {g, devices, num_devices, NULL, NULL, NULL, NULL, 0};
  int ids = g->num_ids ? g->num_ids : 1;
  rf__executor *x = rf__calloc(1, sizeof *x);
  b.local = rf__malloc(sizeof(int) * (size_t)ids);
  b.in_base = rf__malloc(sizeof(int) * (size_t)ids);
  b.counts = rf__calloc((size_t)num_devices, sizeof(int));
  rf_status *st = NULL;
  if (!x || !b.local || !b.in_base || !b.counts)
    st = rf__oom();
  else
    st = build_all(&b, x);
  rf__free(b.local);
  rf__free(b.in_base);
  rf__free(b.counts);
  rf__free(b.seen_out);
  if (st) {
    rf__executor_free(x);
    return st;
  }
  *out = x;
  return NULL;
}

/* ---- frames ---- */

static frame *frame_new(dplan *p) {
  frame *f = rf__calloc(1, sizeof *f);
  if (!f) return NULL;
  f->plan = p;
  f->slots = rf__calloc((size_t)(p->num_slots ? p->num_slots : 1),
                        sizeof(rf_tensor *));
  f->outs =
      rf__calloc((size_t)(p->num_outs ? p->num_outs : 1), sizeof(rf_tensor *));
  f->pending = rf__malloc(sizeof(atomic_int) * (size_t)p->num_nodes);
  f->actx = rf__calloc((size_t)(p->num_async ? p->num_async : 1),
                       sizeof(rf__kernel_ctx));
  f->refs = rf__malloc(sizeof(node_ref) * (size_t)p->num_nodes);
  f->handoff = rf__malloc(sizeof(int) * (size_t)p->num_nodes);
  f->batches = rf__malloc(sizeof(batch) * (size_t)p->num_nodes);
  f->bucket_tensors = rf__malloc(sizeof(_Atomic(rf_tensor *)) *
                                 (size_t)(p->num_buckets ? p->num_buckets : 1));
  if (!f->slots || !f->outs || !f->pending || !f->actx || !f->refs ||
      !f->handoff || !f->batches || !f->bucket_tensors) {
    frame_free(f);
    return NULL;
  }
  for (int b = 0; b < p->num_buckets; b++)
    atomic_init(&f->bucket_tensors[b], NULL);
  for (int i = 0; i < p->num_nodes; i++) {
    atomic_init(&f->pending[i], p->nodes[i].init_pending);
    f->refs[i] = (node_ref){f, i};
  }
  atomic_init(&f->holders, 0);
  atomic_init(&f->handoff_top, 0);
  return f;
}

frame *rf__frame_acquire(dplan *p) {
  pthread_mutex_lock(&p->frames_mu);
  frame *f = p->free_frames;
  if (f) p->free_frames = f->next;
  pthread_mutex_unlock(&p->frames_mu);
  return f ? f : frame_new(p);
}

void rf__frame_release(dplan *p, frame *f) {
  rf__frame_drop_buckets(f);
  f->run = NULL;
  f->step = NULL;
  pthread_mutex_lock(&p->frames_mu);
  f->next = p->free_frames;
  p->free_frames = f;
  pthread_mutex_unlock(&p->frames_mu);
}

void rf__frame_scrub(frame *f) {
  dplan *p = f->plan;
  for (int i = 0; i < p->num_slots; i++) {
    rf_tensor_release(f->slots[i]);
    f->slots[i] = NULL;
  }
  for (int i = 0; i < p->num_outs; i++) {
    rf_tensor_release(f->outs[i]);
    f->outs[i] = NULL;
  }
  for (int i = 0; i < p->num_nodes; i++)
    atomic_store_explicit(&f->pending[i], p->nodes[i].init_pending,
                          memory_order_relaxed);
}
