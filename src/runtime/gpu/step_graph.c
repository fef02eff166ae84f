/* runtime/gpu/step_graph.c - a plan's step captured as one CUDA graph and
 * replayed (rf_session_options.gpu_graphs; the decision: step_graph_policy.c).
 *
 * Capture: the executor runs the step once with every GPU stream of the plan
 * joined to one capture (forked from the first device's stream, joined back
 * before it ends; relaxed mode, so the pool's threads enqueue as usual), the
 * feeds read from pinned buffers the graph owns and _Retval's copies left in
 * pinned buffers the graph owns. Then the graph is launched: that launch is
 * the step. A replay copies the feeds into those buffers, launches, and
 * copies the fetched values out; no kernel runs on the host.
 *
 * Invariants: (1) every device block the graph writes stays the graph's:
 * the blocks freed during the capture (the step's temporaries) are held out
 * of the device caches until the graph goes (device/gpu/allocator.c); (2)
 * the graph reads each variable where the capture found it: a variable
 * whose update swapped in a new buffer gets a copy of that buffer into the
 * old one (a block the graph holds) at the graph's start, and a replay
 * checks first that every variable of the plan's devices still has the
 * buffer the capture left (else the graph is dropped and the step runs
 * without it); (3) one launch of a graph at a time uses its buffers (mu,
 * held from the launch to the copy of the fetches); (4) the graph's kernels
 * keyed by the step's number (Dropout) read it from the plan's slot in
 * device memory, which the graph's first nodes write: a replay sets the
 * value those nodes write to its own step's number before it launches. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_check.h"
#include "core/log.h"
#include "core/mem.h"
#include "comm/collective.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"
#include "device/step.h"
#include "runtime/step_graph.h"

/* A variable of a plan's device as the graph left it. */
typedef struct var_snap {
  rf__variable *v;
  const rf__device *d;
  rf_tensor *value; /* not retained: a reference would stop updates in place */
  void *data;
} var_snap;

struct rf__step_graph {
  pthread_mutex_t mu; /* held from a launch to the copy of its fetches */
  rf__graph_shapes shapes;
  const char *never; /* why the plan is never captured (never_buf) */
  char never_buf[512];
  bool told_never;
  bool told_full;     /* said that the session's graphs are at the limit */
  atomic_int *kept_n; /* the session's graphs_kept */
  cudaGraphExec_t exec;
  cudaEvent_t ev; /* the capture's fork; then the end of each launch */
  bool kept;      /* this run launched the kept graph: copy its fetches */
  int num_feeds, num_fetches, num_gpus;
  rf_tensor **staging; /* pinned, read by the graph's feed copies */
  rf_tensor **outs;    /* pinned, written by the graph's fetch copies */
  rf__gpu_held **held; /* per GPU device of the plan */
  var_snap *vars;
  int num_vars, cap_vars;
  int64_t *slot;     /* the step's number, on the plan's GPU (rf__step) */
  cudaGraph_t graph; /* the kept graph's own, for its slot nodes */
  cudaGraphNode_t slot_set[2]; /* the low and high words; NULL if unread */
  int debug;                   /* RF_GPU_GRAPH_DEBUG's flags (step_graph.h) */
  int64_t launches;            /* of the kept graph; 1: the capture's own */
};

rf_status *rf__step_graph_new(rf_session *s, rf__plan *p,
                              struct rf__step_graph **out) {
  rf__step_graph *g = rf__calloc(1, sizeof *g);
  RF_CHECK_ALLOC(g);
  pthread_mutex_init(&g->mu, NULL);
  g->num_feeds = p->num_feeds;
  g->num_fetches = p->num_fetches;
  g->num_gpus = p->num_gpus;
  g->debug = s->graph_debug;
  g->kept_n = &s->graphs_kept;
  rf_status *st = rf__graph_shapes_init(&g->shapes, p->num_feeds);
  g->staging = rf__calloc((size_t)p->num_feeds + 1, sizeof(rf_tensor *));
  g->outs = rf__calloc((size_t)p->num_fetches + 1, sizeof(rf_tensor *));
  g->held = rf__calloc((size_t)p->num_gpus + 1, sizeof(rf__gpu_held *));
  if (!st && (!g->staging || !g->outs || !g->held)) st = rf__oom();
  if (st) {
    rf__step_graph_free(g);
    return st;
  }
  g->never = rf__graph_unsupported(s, p, g->never_buf, sizeof g->never_buf);
  *out = g;
  return NULL;
}

/* Waits for the graph's last launch, then lets go of the graph and what it
 * held; the plan may capture again. */
static void drop(rf__step_graph *g, int num_gpus) {
  if (g->ev) (void)cudaEventSynchronize(g->ev);
  if (g->exec) {
    (void)cudaGraphExecDestroy(g->exec);
    atomic_fetch_sub(g->kept_n, 1);
  }
  if (g->graph) (void)cudaGraphDestroy(g->graph);
  g->graph = NULL;
  g->slot_set[0] = g->slot_set[1] = NULL;
  (void)cudaGetLastError();
  g->exec = NULL;
  for (int i = 0; i < num_gpus; i++) {
    rf__gpu_held_release(g->held[i]);
    g->held[i] = NULL;
  }
  for (int i = 0; i < g->num_fetches; i++) {
    rf_tensor_release(g->outs[i]);
    g->outs[i] = NULL;
  }
  g->num_vars = 0;
  rf__graph_forget(&g->shapes);
}

void rf__step_graph_free(rf__step_graph *g) {
  if (!g) return;
  int prev = rf__gpu_current();
  if (g->held && g->outs) drop(g, g->num_gpus);
  for (int i = 0; g->staging && i < g->num_feeds; i++)
    rf_tensor_release(g->staging[i]);
  if (g->ev) (void)cudaEventDestroy(g->ev);
  if (g->slot) (void)cudaFree(g->slot);
  rf__gpu_make_current(prev);
  rf__graph_shapes_fini(&g->shapes);
  rf__free(g->staging);
  rf__free(g->outs);
  rf__free(g->held);
  rf__free(g->vars);
  pthread_mutex_destroy(&g->mu);
  rf__free(g);
}

/* Says once why the plan is not captured, and never tries again. */
static void give_up(const rf__plan *p, rf__step_graph *g, const char *why) {
  if (why != g->never_buf)
    snprintf(g->never_buf, sizeof g->never_buf, "%s", why);
  g->never = g->never_buf;
  g->told_never = true;
  RF__LOG(RF_LOG_INFO,
          "gpu graphs: the step of plan '%s' is not captured: %s; it runs "
          "without a graph",
          p->signature, g->never);
}

/* ---- variables ---- */

static rf_status *snapshot_vars(rf__step_graph *g, const rf__plan *p) {
  g->num_vars = 0;
  for (int i = 0; i < p->num_gpus; i++) {
    rf__device *d = p->gpus[i];
    pthread_mutex_lock(&d->vars_mu);
    rf__variable *v, *tmp;
    rf_status *st = NULL;
    HASH_ITER(hh, d->vars, v, tmp) {
      if (g->num_vars == g->cap_vars &&
          rf__grow(&g->vars, &g->cap_vars, g->num_vars + 1, sizeof *g->vars)) {
        st = rf__oom();
        break;
      }
      pthread_mutex_lock(&v->mu);
      g->vars[g->num_vars++] =
          (var_snap){v, d, v->value, v->value ? v->value->data : NULL};
      pthread_mutex_unlock(&v->mu);
    }
    pthread_mutex_unlock(&d->vars_mu);
    RF_CHECK(st);
  }
  return NULL;
}

/* Whether variable k still holds what the snapshot says; *now its value
 * (not retained). */
static bool var_same(const var_snap *s, rf_tensor **now) {
  pthread_mutex_lock(&s->v->mu);
  rf_tensor *t = s->v->value;
  bool same = t == s->value && (t ? t->data : NULL) == s->data;
  pthread_mutex_unlock(&s->v->mu);
  if (now) *now = t;
  return same;
}

/* Whether the graph holds the device block at ptr of d (a freed buffer). */
static bool holds(const rf__step_graph *g, const rf__plan *p,
                  const rf__device *d, const void *ptr) {
  for (int i = 0; i < p->num_gpus; i++)
    if (p->gpus[i] == d) return rf__gpu_held_has(g->held[i], ptr);
  return false;
}

/* For each variable whose value the captured step swapped for a new buffer:
 * a copy of the new buffer into the old one before everything else in the
 * graph, so that the graph's reads (of the old buffer) see the variable as
 * it is at each launch. The old buffer must be one the graph holds. NULL
 * when done; a reason never to capture the step; or NULL with *oom set. */
static const char *pin_vars(rf__step_graph *g, const rf__plan *p,
                            cudaGraph_t graph, char *buf, size_t len,
                            rf_status **oom) {
  cudaGraphNode_t *roots = NULL, *from = NULL;
  size_t nroots = 0;
  const char *why = NULL;
  for (int k = 0; k < g->num_vars && !why; k++) {
    var_snap *s = &g->vars[k];
    rf_tensor *now;
    if (var_same(s, &now)) continue;
    if (!s->value || !now || !now->on_gpu || !holds(g, p, s->d, s->data)) {
      snprintf(buf, len,
               "variable '%.200s' on %s was given a new buffer by the step and "
               "its old one is not the step's to reuse",
               s->v->name, s->d->canonical);
      why = buf;
      break;
    }
    if (!roots) {
      cudaError_t e = cudaGraphGetRootNodes(graph, NULL, &nroots);
      if (e == cudaSuccess) {
        roots = rf__calloc(nroots + 1, sizeof *roots);
        from = rf__calloc(nroots + 1, sizeof *from);
        if (!roots || !from) {
          *oom = rf__oom();
          break;
        }
        e = cudaGraphGetRootNodes(graph, roots, &nroots);
      }
      if (e != cudaSuccess) {
        why = "the captured graph's first nodes could not be listed";
        break;
      }
    }
    cudaGraphNode_t copy;
    cudaError_t e =
        cudaGraphAddMemcpyNode1D(&copy, graph, NULL, 0, s->data, now->data,
                                 now->nbytes, cudaMemcpyDeviceToDevice);
    for (size_t r = 0; r < nroots; r++) from[r] = copy;
    if (e == cudaSuccess && nroots)
      e = cudaGraphAddDependencies(graph, from, roots, NULL, nroots);
    /* Before this first launch the old buffer holds the value and the new
     * one nothing: copy it over first, in the variable's stream order. */
    rf__gpu_enqueue_begin(s->d->order);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(now->data, s->data, now->nbytes,
                          cudaMemcpyDeviceToDevice, (cudaStream_t)s->d->stream);
    rf__gpu_enqueue_end(s->d->order);
    if (e != cudaSuccess) {
      snprintf(buf, len, "adding the copy of variable '%.200s' failed: %s",
               s->v->name, cudaGetErrorString(e));
      why = buf;
    }
    s->value = now; /* what a replay expects to find */
    s->data = now->data;
  }
  (void)cudaGetLastError();
  rf__free(roots);
  rf__free(from);
  return why;
}

/* ---- the step's number ---- */

/* The parameters of slot node w (0: low word, 1: high) writing number. */
static struct cudaMemsetParams slot_params(const rf__step_graph *g, int w,
                                           int64_t number) {
  uint64_t u = (uint64_t)number;
  return (struct cudaMemsetParams){.dst = (uint32_t *)g->slot + w,
                                   .pitch = sizeof(uint32_t),
                                   .value = (uint32_t)(w ? u >> 32 : u),
                                   .elementSize = sizeof(uint32_t),
                                   .width = 1,
                                   .height = 1};
}

/* Two memsets writing the step's number into the slot before everything
 * else in the graph (a memset's value is one of 32 bits at most). */
static cudaError_t add_slot_nodes(rf__step_graph *g, cudaGraph_t graph,
                                  int64_t number) {
  size_t nroots = 0;
  cudaGraphNode_t *roots = NULL;
  cudaError_t e = cudaGraphGetRootNodes(graph, NULL, &nroots);
  if (e == cudaSuccess) {
    roots = rf__calloc(nroots + 1, sizeof *roots);
    e = roots ? cudaGraphGetRootNodes(graph, roots, &nroots)
              : cudaErrorMemoryAllocation;
  }
  for (int w = 0; w < 2 && e == cudaSuccess; w++) {
    struct cudaMemsetParams m = slot_params(g, w, number);
    e = cudaGraphAddMemsetNode(&g->slot_set[w], graph,
                               w ? &g->slot_set[0] : NULL, (size_t)w, &m);
  }
  for (size_t r = 0; r < nroots && e == cudaSuccess; r++)
    e = cudaGraphAddDependencies(graph, &g->slot_set[1], &roots[r], NULL, 1);
  rf__free(roots);
  if (e != cudaSuccess) g->slot_set[0] = g->slot_set[1] = NULL;
  return e;
}

/* Sets the step's number the next launch of exec writes into the slot. */
static rf_status *set_number(rf__step_graph *g, const rf__plan *p,
                             int64_t number) {
  if (!g->slot_set[0]) return NULL;
  const rf__device *o = p->gpus[0];
  RF_CHECK(o->enter(o));
  for (int w = 0; w < 2; w++) {
    struct cudaMemsetParams m = slot_params(g, w, number);
    cudaError_t e =
        cudaGraphExecMemsetNodeSetParams(g->exec, g->slot_set[w], &m);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return rf__error(RF_INTERNAL,
                       "%s: setting the step's number in the CUDA graph of "
                       "plan '%s': %s",
                       o->canonical, p->signature, cudaGetErrorString(e));
    }
  }
  return NULL;
}

/* ---- launches ---- */

static rf__device *origin_of(const rf__plan *p) { return p->gpus[0]; }

/* Counts an enqueue on every stream of the plan (open while begun), so a
 * collective never leaves out a wait across the graph (device/gpu/order.h). */
static void bracket(const rf__plan *p, bool begin) {
  for (int i = 0; i < p->num_gpus; i++)
    if (begin)
      rf__gpu_enqueue_begin(p->gpus[i]->order);
    else
      rf__gpu_enqueue_end(p->gpus[i]->order);
}

/* Makes the origin stream wait for the others' work so far (fork: true), or
 * the others wait for g->ev recorded on the origin (join). */
static cudaError_t link_streams(rf__step_graph *g, const rf__plan *p,
                                bool fork) {
  cudaStream_t o = (cudaStream_t)origin_of(p)->stream;
  cudaError_t e = cudaSuccess;
  if (!fork) e = cudaEventRecord(g->ev, o);
  for (int i = 1; i < p->num_gpus && e == cudaSuccess; i++) {
    const rf__device *d = p->gpus[i];
    if (d->stream == (void *)o) continue;
    if (fork) {
      e = cudaEventRecord((cudaEvent_t)d->order_event, (cudaStream_t)d->stream);
      if (e == cudaSuccess)
        e = cudaStreamWaitEvent(o, (cudaEvent_t)d->order_event, 0);
    } else {
      e = cudaStreamWaitEvent((cudaStream_t)d->stream, g->ev, 0);
    }
  }
  return e;
}

/* Launches exec after the plan's streams' earlier work; every stream of the
 * plan then waits for it (g->ev marks its end). With RF_GPU_GRAPH_DEBUG=sync
 * the host waits for it here, so that a fault names this launch. */
static rf_status *launch(rf__step_graph *g, const rf__plan *p,
                         cudaGraphExec_t exec) {
  const rf__device *o = origin_of(p);
  RF_CHECK(o->enter(o));
  bracket(p, true);
  cudaError_t e = link_streams(g, p, true);
  if (e == cudaSuccess) e = cudaGraphLaunch(exec, (cudaStream_t)o->stream);
  if (e == cudaSuccess) e = link_streams(g, p, false);
  bracket(p, false);
  int64_t n = ++g->launches;
  bool waited = e == cudaSuccess && (g->debug & RF__GRAPH_DEBUG_SYNC);
  if (waited) e = cudaEventSynchronize(g->ev);
  if (e == cudaSuccess) return NULL;
  (void)cudaGetLastError();
  return rf__error(RF_INTERNAL,
                   "%s: %s launch %lld of the step's CUDA graph of plan "
                   "'%s' (%s): %s (%s)",
                   o->canonical, waited ? "running" : "enqueueing",
                   (long long)n, p->signature,
                   n == 1 ? "the capture's own" : "a replay",
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- capture ---- */

/* A graph node and its index in the node list, sorted by node. */
typedef struct node_at {
  cudaGraphNode_t node;
  size_t at;
} node_at;

static int node_at_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const node_at *)a)->node,
            y = (uintptr_t)((const node_at *)b)->node;
  return x < y ? -1 : x > y;
}

static size_t index_of(const node_at *by, size_t n, cudaGraphNode_t node) {
  node_at key = {node, 0};
  const node_at *f = bsearch(&key, by, n, sizeof *by, node_at_cmp);
  return f ? f->at : SIZE_MAX;
}

/* The most kernel nodes on one path through the graph (nodes[0, n), types
 * in kernel[]): what the step's dependencies serialise, however many
 * streams the GPU runs at once. 0 when the edges cannot be read. */
static size_t longest_chain(cudaGraph_t graph, cudaGraphNode_t *nodes,
                            const bool *kernel, size_t n) {
  size_t ne = 0, best = 0;
  if (cudaGraphGetEdges(graph, NULL, NULL, NULL, &ne) != cudaSuccess) return 0;
  cudaGraphNode_t *from = rf__calloc(ne + 1, sizeof *from),
                  *to = rf__calloc(ne + 1, sizeof *to);
  node_at *by = rf__calloc(n + 1, sizeof *by);
  size_t *indeg = rf__calloc(n + 1, sizeof *indeg),
         *depth = rf__calloc(n + 1, sizeof *depth),
         *queue = rf__calloc(n + 1, sizeof *queue);
  /* The edges by source (first[i] .. first[i + 1] in succ). */
  size_t *first = rf__calloc(n + 2, sizeof *first),
         *succ = rf__calloc(ne + 1, sizeof *succ),
         *dst = rf__calloc(ne + 1, sizeof *dst);
  if (!from || !to || !by || !indeg || !depth || !queue || !first || !succ ||
      !dst || cudaGraphGetEdges(graph, from, to, NULL, &ne) != cudaSuccess)
    goto out;
  for (size_t i = 0; i < n; i++) by[i] = (node_at){nodes[i], i};
  qsort(by, n, sizeof *by, node_at_cmp);
  for (size_t k = 0; k < ne; k++) {
    size_t a = index_of(by, n, from[k]);
    dst[k] = index_of(by, n, to[k]);
    if (a == SIZE_MAX || dst[k] == SIZE_MAX) goto out;
    first[a + 2]++;
    indeg[dst[k]]++;
  }
  for (size_t i = 2; i < n + 2; i++) first[i] += first[i - 1];
  for (size_t k = 0; k < ne; k++)
    succ[first[index_of(by, n, from[k]) + 1]++] = dst[k];
  /* Kahn's order; depth[i]: kernels on the longest path ending at i. */
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < n; i++)
    if (!indeg[i]) queue[tail++] = i;
  while (head < tail) {
    size_t i = queue[head++];
    depth[i] += kernel[i];
    if (depth[i] > best) best = depth[i];
    for (size_t k = first[i]; k < first[i + 1]; k++) {
      size_t j = succ[k];
      if (depth[i] > depth[j]) depth[j] = depth[i];
      if (--indeg[j] == 0) queue[tail++] = j;
    }
  }
out:
  rf__free(from);
  rf__free(to);
  rf__free(by);
  rf__free(indeg);
  rf__free(depth);
  rf__free(queue);
  rf__free(first);
  rf__free(succ);
  rf__free(dst);
  (void)cudaGetLastError();
  return best;
}

/* What the captured graph holds, for the log: its nodes by type (memory
 * nodes would be cuBLAS's workspaces: RF_GPU_GRAPH_DEBUG=workspace), and
 * the longest chain of dependent kernels. */
static void describe(cudaGraph_t graph, char *buf, size_t len) {
  size_t n = 0;
  cudaGraphNode_t *nodes = NULL;
  bool *kernel = NULL;
  cudaError_t e = cudaGraphGetNodes(graph, NULL, &n);
  if (e == cudaSuccess && n) {
    nodes = rf__calloc(n, sizeof *nodes);
    kernel = rf__calloc(n, sizeof *kernel);
    e = nodes && kernel ? cudaGraphGetNodes(graph, nodes, &n)
                        : cudaErrorMemoryAllocation;
  }
  size_t kernels = 0, copies = 0, sets = 0, allocs = 0, frees = 0, empty = 0,
         other = 0;
  for (size_t i = 0; e == cudaSuccess && i < n; i++) {
    enum cudaGraphNodeType t = cudaGraphNodeTypeCount;
    if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess)
      t = cudaGraphNodeTypeCount;
    kernel[i] = t == cudaGraphNodeTypeKernel;
    switch (t) {
      case cudaGraphNodeTypeKernel: kernels++; break;
      case cudaGraphNodeTypeMemcpy: copies++; break;
      case cudaGraphNodeTypeMemset: sets++; break;
      case cudaGraphNodeTypeMemAlloc: allocs++; break;
      case cudaGraphNodeTypeMemFree: frees++; break;
      case cudaGraphNodeTypeEmpty: empty++; break;
      default: other++;
    }
  }
  size_t chain =
      e == cudaSuccess && n ? longest_chain(graph, nodes, kernel, n) : 0;
  rf__free(nodes);
  rf__free(kernel);
  (void)cudaGetLastError();
  if (e != cudaSuccess)
    snprintf(buf, len, "nodes not listed: %s", cudaGetErrorString(e));
  else
    snprintf(buf, len,
             "%zu nodes: %zu kernels, %zu copies, %zu memsets, %zu memory "
             "allocations, %zu memory frees, %zu empty, %zu other; at most "
             "%zu kernels on one path",
             n, kernels, copies, sets, allocs, frees, empty, other, chain);
}

/* Pinned buffers holding this run's feeds (made anew when a shape moved). */
static rf_status *stage_feeds(rf__step_graph *g, rf_tensor *const *feeds,
                              bool fresh) {
  for (int i = 0; i < g->num_feeds; i++) {
    const rf_tensor *f = feeds[i];
    rf_tensor *t = g->staging[i];
    if (fresh) {
      rf_tensor_release(t);
      g->staging[i] = NULL;
      RF_CHECK(rf_tensor_new(f->dtype, &f->shape, rf__gpu_pinned_allocator(),
                             &g->staging[i]));
      t = g->staging[i];
    }
    if (f->nbytes) memcpy(t->data, f->data, f->nbytes);
  }
  return NULL;
}

/* Starts the capture on the plan's streams; on error none is under way. */
static rf_status *begin_capture(rf__step_graph *g, const rf__plan *p) {
  const rf__device *o = origin_of(p);
  RF_CHECK(o->enter(o));
  if (!g->ev)
    RF_CUDA_CHECK(cudaEventCreateWithFlags(&g->ev, cudaEventDisableTiming));
  for (int i = 0; i < p->num_gpus; i++)
    rf__gpu_cache_capture_begin(rf__gpu_device_cache(p->gpus[i]));
  bracket(p, true);
  cudaStream_t os = (cudaStream_t)o->stream;
  cudaError_t e = cudaStreamBeginCapture(os, cudaStreamCaptureModeRelaxed);
  if (e == cudaSuccess) {
    e = cudaEventRecord(g->ev, os);
    for (int i = 1; i < p->num_gpus && e == cudaSuccess; i++)
      if (p->gpus[i]->stream != (void *)os)
        e = cudaStreamWaitEvent((cudaStream_t)p->gpus[i]->stream, g->ev, 0);
    if (e != cudaSuccess) {
      cudaGraph_t junk = NULL;
      (void)cudaStreamEndCapture(os, &junk);
      if (junk) (void)cudaGraphDestroy(junk);
    }
  }
  if (e == cudaSuccess) return NULL;
  (void)cudaGetLastError();
  bracket(p, false);
  for (int i = 0; i < p->num_gpus; i++) {
    rf__gpu_held *h;
    bool trimmed;
    rf_status_free(rf__gpu_cache_capture_end(rf__gpu_device_cache(p->gpus[i]),
                                             false, &h, &trimmed));
  }
  return rf__error(RF_INTERNAL, "%s: starting the capture: %s", o->canonical,
                   cudaGetErrorString(e));
}

/* Joins the other streams back and ends the capture: the graph, or NULL
 * with *err set. The caches' captures end too (keeping the freed blocks
 * when there is a graph). */
static cudaGraph_t end_capture(rf__step_graph *g, const rf__plan *p,
                               cudaError_t *err, rf_status **held_st) {
  const rf__device *o = origin_of(p);
  cudaStream_t os = (cudaStream_t)o->stream;
  cudaError_t e = o->enter(o) ? cudaErrorUnknown : cudaSuccess;
  for (int i = 1; i < p->num_gpus; i++) {
    const rf__device *d = p->gpus[i];
    if (d->stream == (void *)os) continue;
    cudaError_t r =
        cudaEventRecord((cudaEvent_t)d->order_event, (cudaStream_t)d->stream);
    if (r == cudaSuccess)
      r = cudaStreamWaitEvent(os, (cudaEvent_t)d->order_event, 0);
    if (e == cudaSuccess) e = r;
  }
  cudaGraph_t graph = NULL;
  cudaError_t r = cudaStreamEndCapture(os, &graph);
  if (e == cudaSuccess) e = r;
  if (e != cudaSuccess && graph) {
    (void)cudaGraphDestroy(graph);
    graph = NULL;
  }
  (void)cudaGetLastError();
  bracket(p, false);
  *held_st = NULL;
  bool trimmed = false;
  for (int i = 0; i < p->num_gpus; i++) {
    bool t;
    rf_status *st = rf__gpu_cache_capture_end(rf__gpu_device_cache(p->gpus[i]),
                                              graph != NULL, &g->held[i], &t);
    trimmed |= t;
    if (st && !*held_st)
      *held_st = st;
    else
      rf_status_free(st);
  }
  if (trimmed && graph) { /* it may name blocks given back to CUDA */
    (void)cudaGraphDestroy(graph);
    graph = NULL;
    e = cudaErrorMemoryAllocation;
  }
  *err = e;
  return graph;
}

/* Undoes what the capture run left for a run without the graph: its
 * fetches, its cancellation, its step id (the collectives met under it). */
static void reset_step(rf_session *s, rf__step *step) {
  for (int i = 0; i < step->num_fetches; i++) {
    rf_tensor_release(step->fetches[i]);
    step->fetches[i] = NULL;
  }
  atomic_store(&step->cancelled, 0);
  atomic_store(&step->not_replayable, NULL);
  rf__collective_end_step(s->collectives, step->id);
  step->id = atomic_fetch_add(&s->next_step, 1);
}

static void release_held(rf__step_graph *g, const rf__plan *p) {
  for (int i = 0; i < p->num_gpus; i++) {
    rf__gpu_held_release(g->held[i]);
    g->held[i] = NULL;
  }
}

/* The fetched values' tensors for the caller, made before the launch so
 * that a step failing for want of memory has not run (the copies are made
 * by rf__step_graph_finish). */
static rf_status *new_fetches(rf__step_graph *g, rf__step *step) {
  for (int i = 0; i < g->num_fetches; i++) {
    const rf_tensor *b = g->outs[i];
    if (b)
      RF_CHECK(rf_tensor_new(b->dtype, &b->shape, rf__gpu_pinned_allocator(),
                             &step->fetches[i]));
  }
  return NULL;
}

/* After a capture to keep: the graph keeps the pinned buffers its fetch
 * copies write, and the step gets new tensors for their values. Nonzero
 * (and the buffers left to the step: they hold this launch's values, and
 * the graph is not kept) when those cannot be had. */
static int take_fetches(rf__step_graph *g, rf__step *step) {
  for (int i = 0; i < g->num_fetches; i++) {
    g->outs[i] = step->fetches[i];
    step->fetches[i] = NULL;
  }
  rf_status *st = new_fetches(g, step);
  if (!st) return 0;
  RF__LOG(RF_LOG_DEBUG, "gpu graphs: not kept: %s", rf_status_message(st));
  rf_status_free(st);
  for (int i = 0; i < g->num_fetches; i++) {
    rf_tensor_release(step->fetches[i]);
    step->fetches[i] = g->outs[i];
    g->outs[i] = NULL;
  }
  return 1;
}

/* Captures the step and launches the graph (the step's run), keeping it for
 * replays when it can be; false when the step must run without it (nothing
 * of it has run: the caller runs the executor). */
static bool capture(rf_session *s, rf__plan *p, rf__step_graph *g,
                    rf__step *step, rf_status **out) {
  char why[512];
  if (!rf__graph_capture_begin(s)) {
    RF__LOG(RF_LOG_DEBUG,
            "gpu graphs: plan '%s': another run is under way, not captured "
            "now",
            p->signature);
    return false;
  }
  rf_tensor *const *fed = step->feeds;
  drop(g, p->num_gpus);
  g->launches = 0;
  if (atomic_load(g->kept_n) >= RF__GRAPH_MAX_KEPT) {
    if (!g->told_full)
      RF__LOG(RF_LOG_INFO,
              "gpu graphs: plan '%s': the session already keeps %d step "
              "graphs (the most it keeps): this step runs without one",
              p->signature, RF__GRAPH_MAX_KEPT);
    g->told_full = true;
    rf__graph_capture_end(s);
    return false;
  }
  rf_status *st = stage_feeds(g, fed, true);
  if (!st && !g->slot) {
    const rf__device *o = origin_of(p);
    st = o->enter(o);
    if (!st)
      st = RF_CUDA_STATUS(cudaMalloc((void **)&g->slot, sizeof(int64_t)));
  }
  if (!st) st = snapshot_vars(g, p);
  if (!st) st = begin_capture(g, p);
  if (st) {
    RF__LOG(RF_LOG_WARN, "gpu graphs: plan '%s': not captured: %s",
            p->signature, rf_status_message(st));
    rf_status_free(st);
    rf__graph_capture_end(s);
    return false;
  }
  step->capturing = true;
  step->capture_serial = (g->debug & RF__GRAPH_DEBUG_SERIAL) != 0;
  step->feeds = g->staging;
  step->number_slot = g->slot;
  atomic_store(&step->number_read, false);
  rf_status *run = rf__executor_run(p->executor, step);
  step->capturing = step->capture_serial = false;
  step->number_slot = NULL;
  step->feeds = fed;
  cudaError_t e;
  rf_status *held_st;
  cudaGraph_t graph = end_capture(g, p, &e, &held_st);
  /* never: a reason the step is never captured; transient: only this
   * capture is not kept (out of memory) */
  const char *never = atomic_load(&step->not_replayable);
  if (!never && atomic_load(&step->checks))
    never = "its collectives are checked after each step (NCCL)";
  rf_status *transient = held_st;
  if (graph && !never && !transient)
    never = pin_vars(g, p, graph, why, sizeof why, &transient);
  if (graph && !never && !transient && atomic_load(&step->number_read)) {
    e = add_slot_nodes(g, graph, rf__step_number(step));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(why, sizeof why,
               "adding the write of the step's number failed: %s",
               cudaGetErrorString(e));
      never = why;
    }
  }
  char nodes[320] = "";
  if (graph && rf__log_on(RF_LOG_INFO)) describe(graph, nodes, sizeof nodes);
  cudaGraphExec_t exec = NULL;
  if (graph) {
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (g->slot_set[0] && e == cudaSuccess)
      g->graph = graph; /* kept for its slot nodes while exec lives */
    else
      (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess) exec = NULL;
    (void)cudaGetLastError();
  }
  if (!exec) {
    rf_status_free(transient);
    g->slot_set[0] = g->slot_set[1] = NULL;
    /* Nothing of the step ran. Variables the step swapped for new buffers
     * now hold unwritten ones: a failed capture may not go unnoticed. */
    release_held(g, p);
    bool swapped = false;
    for (int k = 0; k < g->num_vars; k++)
      swapped |= !var_same(&g->vars[k], NULL);
    snprintf(why, sizeof why, "capturing it failed: %s%s",
             run ? rf_status_message(run) : cudaGetErrorString(e),
             swapped ? " (variables it updated were lost)" : "");
    if (run) /* the step's own failure: a later run captures again */
      RF__LOG(RF_LOG_INFO, "gpu graphs: plan '%s': %s", p->signature, why);
    else
      give_up(p, g, why);
    rf__graph_capture_end(s);
    if (!swapped) {
      rf_status_free(run);
      reset_step(s, step);
      return false;
    }
    *out = rf__error(RF_INTERNAL, "%s", why);
    rf_status_free(run);
    return true;
  }
  bool keep = !run && !never && !transient;
  if (transient)
    RF__LOG(RF_LOG_INFO, "gpu graphs: plan '%s': the capture is not kept: %s",
            p->signature, rf_status_message(transient));
  rf_status_free(transient);
  if (keep && take_fetches(g, step)) keep = false;
  /* The launch is the step: what was enqueued before an error runs, as it
   * would have without the graph. */
  rf_status *st2 = launch(g, p, exec);
  if (!keep || st2) {
    (void)cudaGraphExecDestroy(exec); /* freed once the launch has run */
    if (g->graph) (void)cudaGraphDestroy(g->graph);
    g->graph = NULL;
    g->slot_set[0] = g->slot_set[1] = NULL;
    release_held(g, p); /* reused only in each device's order after it */
    for (int i = 0; i < g->num_fetches; i++) {
      rf_tensor_release(g->outs[i]);
      g->outs[i] = NULL;
    }
    g->num_vars = 0;
    if (never) give_up(p, g, never);
    g->kept = false;
    rf__graph_capture_end(s);
    *out = run ? run : st2;
    if (run) rf_status_free(st2);
    return true;
  }
  g->exec = exec;
  atomic_fetch_add(g->kept_n, 1);
  g->kept = true;
  rf__graph_captured(&g->shapes);
  if (rf__log_on(RF_LOG_INFO)) {
    size_t bytes = 0;
    for (int i = 0; i < p->num_gpus; i++)
      bytes += rf__gpu_held_bytes(g->held[i]);
    rf__log_write(RF_LOG_INFO,
                  "gpu graphs: captured the step of plan '%s' on %d GPU "
                  "device(s); it holds %zu bytes of device memory; %s",
                  p->signature, p->num_gpus, bytes, nodes);
  }
  rf__graph_capture_end(s);
  *out = NULL;
  return true;
}

/* ---- replay ---- */

static bool replay(rf__plan *p, rf__step_graph *g, rf__step *step,
                   rf_status **out) {
  for (int k = 0; k < g->num_vars; k++)
    if (!var_same(&g->vars[k], NULL)) {
      RF__LOG(RF_LOG_INFO,
              "gpu graphs: plan '%s': variable '%s' on %s has another buffer "
              "than the graph reads: the graph is dropped and this step runs "
              "without it",
              p->signature, g->vars[k].v->name, g->vars[k].d->canonical);
      drop(g, p->num_gpus);
      return false;
    }
  rf_status *st = NULL;
  if (g->num_feeds) { /* the last launch may still read the buffers */
    const rf__device *o = origin_of(p);
    st = o->enter(o);
    if (!st) st = RF_CUDA_STATUS(cudaEventSynchronize(g->ev));
    if (!st) st = stage_feeds(g, step->feeds, false);
  }
  if (!st) st = new_fetches(g, step);
  if (!st) st = set_number(g, p, rf__step_number(step));
  if (!st) st = launch(g, p, g->exec);
  g->kept = !st;
  *out = st;
  return true;
}

bool rf__step_graph_run(rf_session *s, rf__plan *p, rf__step *step,
                        const rf_feed *feeds, rf_status **st) {
  rf__step_graph *g = p->step_graph;
  (void)feeds;
  *st = NULL;
  if (!g) return false;
  pthread_mutex_lock(&g->mu);
  if (g->never) {
    if (!g->told_never) give_up(p, g, g->never);
    pthread_mutex_unlock(&g->mu);
    return false;
  }
  char why[512];
  rf__graph_action a =
      rf__graph_decide(&g->shapes, step->feeds, why, sizeof why);
  if (why[0])
    RF__LOG(RF_LOG_INFO, "gpu graphs: plan '%s': %s", p->signature, why);
  g->kept = false;
  bool ran = a == RF__GRAPH_REPLAY    ? replay(p, g, step, st)
             : a == RF__GRAPH_CAPTURE ? capture(s, p, g, step, st)
                                      : false;
  if (!ran) pthread_mutex_unlock(&g->mu);
  return ran;
}

rf_status *rf__step_graph_finish(rf_session *s, rf__plan *p, rf__step *step,
                                 rf_status *st) {
  rf__step_graph *g = p->step_graph;
  (void)s;
  if (!st && p->num_fetches) { /* a pipelined step did not wait */
    const rf__device *o = origin_of(p);
    st = o->enter(o);
    if (!st) st = RF_CUDA_STATUS(cudaEventSynchronize(g->ev));
    if (st)
      st = rf__status_prefix(st, "%s: the step's CUDA graph", o->canonical);
  }
  for (int i = 0; g->kept && !st && i < g->num_fetches; i++) {
    const rf_tensor *b = g->outs[i];
    if (b && b->nbytes) memcpy(step->fetches[i]->data, b->data, b->nbytes);
  }
  pthread_mutex_unlock(&g->mu);
  return st;
}
