/* runtime/step_graph_policy.c - whether and when a plan's step is captured
 * as a CUDA graph (see step_graph.h); no CUDA here, so the rules are tested
 * in every build. */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "graph/attrs.h"
#include "ops/op_registry.h"
#include "runtime/step_graph.h"

/* A _Send or _Recv of a crossing control edge: its key ends with
 * ":ctl;<device>" (passes/partition.c). It passes an empty host tensor and
 * enqueues nothing on a GPU. */
static bool token_pair(const rf_node *n) {
  const char *key = NULL;
  if (strcmp(n->op->name, "_Send") && strcmp(n->op->name, "_Recv"))
    return false;
  rf_status *st = rf__attrs_get_string(&n->attrs, "key", &key);
  rf_status_free(st);
  const char *semi = st ? NULL : strrchr(key, ';');
  return semi && semi - key >= 4 && strncmp(semi - 4, ":ctl", 4) == 0;
}

/* Host values a capture may bake into its graph: what the CPU devices of
 * the step compute from constants alone (a Reshape's shape, a NoOp target,
 * the tokens of crossing control edges) is the same at every launch. A node
 * of a CPU device qualifies when it is a NoOp, _Token, Const or token pair,
 * or has data inputs, all of which qualify, and is no _Arg, _Recv (of a
 * value) or _Retval. seen[id]: 0 not yet, 1 yes, 2 no, 3 being looked at. */
static bool fixed_on_host(const rf__plan *p, const rf_node *n, char *seen) {
  if (seen[n->id] == 1 || seen[n->id] == 2) return seen[n->id] == 1;
  if (seen[n->id] == 3) return false; /* a cycle: no graph has one */
  const char *op = n->op->name;
  bool ok;
  if (!strcmp(op, "NoOp") || !strcmp(op, "_Token") || !strcmp(op, "Const") ||
      token_pair(n)) {
    ok = true;
  } else if (n->num_inputs == 0 || !strcmp(op, "_Arg") ||
             !strcmp(op, "_Recv") || !strcmp(op, "_Retval")) {
    ok = false;
  } else {
    seen[n->id] = 3;
    ok = true;
    for (int i = 0; i < n->num_inputs && ok; i++)
      ok = fixed_on_host(p, n->data_in[i]->src, seen);
  }
  seen[n->id] = ok ? 1 : 2;
  return ok;
}

/* The _Send of a _Recv's key, or NULL. */
static const rf_node *sender_of(const rf__plan *p, const rf_node *recv) {
  const char *key = NULL, *other = NULL;
  rf_status_free(rf__attrs_get_string(&recv->attrs, "key", &key));
  for (int id = 0; key && id < p->graph->num_ids; id++) {
    const rf_node *n = p->graph->nodes[id];
    if (!n || strcmp(n->op->name, "_Send")) continue;
    rf_status *st = rf__attrs_get_string(&n->attrs, "key", &other);
    rf_status_free(st);
    if (!st && !strcmp(key, other)) return n;
  }
  return NULL;
}

/* A GPU _Recv of a host value a CPU device computes from constants, kept in
 * host memory (host_memory: no copy, no wait). */
static bool fixed_host_input(const rf_session *s, const rf__plan *p,
                             const rf_node *recv, char *seen) {
  bool host = false;
  if (rf__attrs_find(&recv->attrs, "host_memory"))
    rf_status_free(rf__attrs_get_bool(&recv->attrs, "host_memory", &host));
  const rf_node *send = host ? sender_of(p, recv) : NULL;
  return send && send->assigned_device >= 0 &&
         s->devices[send->assigned_device].name.type != RF_DEVICE_GPU &&
         fixed_on_host(p, send, seen);
}

/* Why node n of a GPU device keeps its step from being replayed. */
static const char *node_reason(const rf_session *s, const rf__plan *p,
                               const rf_node *n, char *seen, char *buf,
                               size_t len) {
  const char *op = n->op->name;
  bool send = !strcmp(op, "_Send"), recv = !strcmp(op, "_Recv");
  if ((send || recv) && !token_pair(n) &&
      !(recv && fixed_host_input(s, p, n, seen))) {
    snprintf(buf, len,
             "node '%.200s' (%s) passes a value between devices, which waits "
             "on the host",
             n->name, op);
    return buf;
  }
  return NULL;
}

static const char *plan_reason(const rf_session *s, const rf__plan *p,
                               char *seen, char *buf, size_t len) {
  for (int i = 1; i < p->num_gpus; i++)
    if (p->gpus[i]->gpu_ordinal != p->gpus[0]->gpu_ordinal) {
      snprintf(buf, len,
               "its GPU devices are on several physical GPUs (%s on GPU %d, "
               "%s on GPU %d)",
               p->gpus[0]->canonical, p->gpus[0]->gpu_ordinal,
               p->gpus[i]->canonical, p->gpus[i]->gpu_ordinal);
      return buf;
    }
  for (int id = 0; id < p->graph->num_ids; id++) {
    const rf_node *n = p->graph->nodes[id];
    if (!n || n->assigned_device < 0) continue;
    const rf__device *d = &s->devices[n->assigned_device];
    if (d->name.type == RF_DEVICE_GPU) {
      const char *why = node_reason(s, p, n, seen, buf, len);
      if (why) return why;
    } else if (!fixed_on_host(p, n, seen)) {
      snprintf(buf, len,
               "a CPU device in the step (%s runs node '%.200s' (%s) on the "
               "host, on values that may change)",
               d->canonical, n->name, n->op->name);
      return buf;
    }
  }
  return NULL;
}

const char *rf__graph_unsupported(const rf_session *s, const rf__plan *p,
                                  char *buf, size_t len) {
  if (p->num_gpus == 0) return "no GPU device in the step";
  if (p->cross_task) return "collectives across tasks of the job";
  char *seen = rf__calloc((size_t)p->graph->num_ids + 1, 1);
  if (!seen) return "out of memory while looking at the step";
  const char *why = plan_reason(s, p, seen, buf, len);
  rf__free(seen);
  return why;
}

/* ---- RF_GPU_GRAPH_DEBUG ---- */

rf_status *rf__graph_debug_parse(const char *text, int *flags) {
  static const struct {
    const char *word;
    int flag;
  } words[] = {{"sync", RF__GRAPH_DEBUG_SYNC},
               {"serial", RF__GRAPH_DEBUG_SERIAL},
               {"workspace", RF__GRAPH_DEBUG_WORKSPACE}};
  *flags = 0;
  for (const char *w = text; w && *w;) {
    size_t n = strcspn(w, ",");
    int flag = 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0] && n; i++)
      if (strlen(words[i].word) == n && !strncmp(w, words[i].word, n))
        flag = words[i].flag;
    if (n && !flag)
      return rf__invalid(
          "RF_GPU_GRAPH_DEBUG: '%.*s' is not one of sync, serial, workspace "
          "(comma-separated)",
          (int)(n > 64 ? 64 : n), w);
    *flags |= flag;
    w += n + (w[n] == ',');
  }
  return NULL;
}

/* ---- shapes ---- */

rf_status *rf__graph_shapes_init(rf__graph_shapes *g, int num_feeds) {
  memset(g, 0, sizeof *g);
  g->num_feeds = num_feeds;
  size_t n = (size_t)(num_feeds > 0 ? num_feeds : 1);
  g->last = rf__calloc(n, sizeof(rf_shape));
  g->captured = rf__calloc(n, sizeof(rf_shape));
  if (g->last && g->captured) return NULL;
  rf__graph_shapes_fini(g);
  return rf__oom();
}

void rf__graph_shapes_fini(rf__graph_shapes *g) {
  rf__free(g->last);
  rf__free(g->captured);
  g->last = g->captured = NULL;
}

static bool same_shape(const rf_shape *a, const rf_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* The first feed whose shape differs from shapes[], or -1. */
static int first_change(const rf__graph_shapes *g, const rf_shape *shapes,
                        rf_tensor *const *feeds) {
  for (int i = 0; i < g->num_feeds; i++)
    if (!same_shape(&shapes[i], &feeds[i]->shape)) return i;
  return -1;
}

rf__graph_action rf__graph_decide(rf__graph_shapes *g, rf_tensor *const *feeds,
                                  char *why, size_t len) {
  why[0] = '\0';
  for (int i = 0; i < g->num_feeds; i++)
    if (feeds[i]->on_gpu) {
      snprintf(why, len,
               "feed %d is in device memory (only host feeds are copied into "
               "the graph's buffers)",
               i);
      g->have_last = false;
      return RF__GRAPH_EAGER;
    }
  if (g->have_captured) {
    int k = first_change(g, g->captured, feeds);
    if (k < 0) return RF__GRAPH_REPLAY;
    char now[128], then[128];
    rf_shape_format(&feeds[k]->shape, now, sizeof now);
    rf_shape_format(&g->captured[k], then, sizeof then);
    snprintf(why, len,
             "feed %d has shape %s, the graph was captured with %s: this step "
             "runs without it",
             k, now, then);
  }
  bool repeat = g->have_last && first_change(g, g->last, feeds) < 0;
  for (int i = 0; i < g->num_feeds; i++) g->last[i] = feeds[i]->shape;
  g->have_last = true;
  return repeat ? RF__GRAPH_CAPTURE : RF__GRAPH_EAGER;
}

void rf__graph_captured(rf__graph_shapes *g) {
  memcpy(g->captured, g->last, sizeof(rf_shape) * (size_t)g->num_feeds);
  g->have_captured = true;
}

void rf__graph_forget(rf__graph_shapes *g) { g->have_captured = false; }

/* ---- runs under way ---- */

void rf__graph_run_begin(rf_session *s) {
  pthread_mutex_lock(&s->graph_mu);
  while (s->graph_capturing) pthread_cond_wait(&s->graph_cv, &s->graph_mu);
  s->graph_runs++;
  pthread_mutex_unlock(&s->graph_mu);
}

void rf__graph_run_end(rf_session *s) {
  pthread_mutex_lock(&s->graph_mu);
  s->graph_runs--;
  pthread_mutex_unlock(&s->graph_mu);
}

bool rf__graph_capture_begin(rf_session *s) {
  pthread_mutex_lock(&s->graph_mu);
  bool alone = s->graph_runs == 1 && !s->graph_capturing;
  if (alone) s->graph_capturing = true;
  pthread_mutex_unlock(&s->graph_mu);
  return alone;
}

void rf__graph_capture_end(rf_session *s) {
  pthread_mutex_lock(&s->graph_mu);
  s->graph_capturing = false;
  pthread_cond_broadcast(&s->graph_cv);
  pthread_mutex_unlock(&s->graph_mu);
}
