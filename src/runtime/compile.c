/* runtime/compile.c - turns the session's graph plus one (feeds, fetches,
 * targets) signature into a runnable plan:
 *   copy -> _Retval per fetch -> fed outputs rewired to _Arg -> prune
 *   -> PRE_PLACEMENT passes -> placement -> POST_PLACEMENT passes
 *   -> partition -> POST_PARTITION passes -> executor plans (kernels bound).
 * Every stage is linear in nodes plus edges. The copy keeps node ids, so the
 * signature's nodes (of the session graph) map to the copy by id. Each phase
 * is logged (core/log.h) and, when asked, dumped before and after
 * (runtime/graph_dump.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ops/op_registry.h"
#include "passes/bucket_collectives.h"
#include "passes/lower_collectives.h"
#include "passes/pass_registry.h"
#include "runtime/graph_dump.h"
#include "runtime/session_internal.h"
#include "runtime/step_graph.h"

/* Compiles (and rf_graph_lower calls) of this process, numbered from 1:
 * log messages and graph dump files name them. */
static atomic_long next_compile = 1;

void rf__plan_free(rf__plan *p) {
  if (!p) return;
  rf__plan_free_spares(p);
#ifdef RF_HAVE_CUDA
  rf__step_graph_free(p->step_graph); /* waits for its last launch */
#endif
  rf__executor_free(p->executor);
  rf__free(p->gpus);
  rf_graph_free(p->graph);
  rf__free(p->signature);
  rf__free(p);
}

/* Parallel arrays for rf__graph_redirect_edges. */
typedef struct scratch {
  rf__edge **edges;
  rf_node **srcs;
  int *outs;
  int cap, cap2, cap3;
} scratch;

static int scratch_reserve(scratch *t, int n) {
  if (rf__grow(&t->edges, &t->cap, n, sizeof(rf__edge *)) ||
      rf__grow(&t->srcs, &t->cap2, n, sizeof(rf_node *)) ||
      rf__grow(&t->outs, &t->cap3, n, sizeof(int)))
    return -1;
  return 0;
}

/* Adds an internal node with attrs T and index. */
static rf_status *add_indexed(rf_graph *g, const char *op_name,
                              const char *base, const char *device,
                              const rf_output *in, int nin, rf_dtype dtype,
                              int index, rf_node **out) {
  const rf__op_def *op = rf__op_find(op_name);
  if (!op) return rf__internal("the runtime op %s is not registered", op_name);
  char name[600];
  rf__graph_unique_name(g, base, name, sizeof name);
  rf__attrs attrs = {0};
  rf__attr_value t = rf__attr_type_value(dtype), i = rf__attr_int(index);
  rf_status *st = rf__attrs_set(&attrs, "T", &t);
  if (!st) st = rf__attrs_set(&attrs, "index", &i);
  if (!st) st = rf__graph_add_node(g, op, name, device, in, nin, &attrs, out);
  rf__attrs_clear(&attrs);
  return st;
}

static rf_status *add_retvals(rf_graph *g, const rf__signature *sig,
                              rf_node **retvals) {
  for (int i = 0; i < sig->num_fetches; i++) {
    rf_output o = {g->nodes[sig->fetches[i].node->id], sig->fetches[i].index};
    char base[512];
    snprintf(base, sizeof base, "_retval/%s_%d", o.node->name, o.index);
    RF_CHECK(add_indexed(g, "_Retval", base, "", &o, 1,
                         o.node->out_dtypes[o.index], i, &retvals[i]));
    /* the node asked for, which lowering may replace as the _Retval's
     * input (a Broadcast's root reads its input): errors name it */
    rf__attr_value f = rf__attr_string_ref(o.node->name);
    rf__attr_value fop = rf__attr_string_ref(o.node->op->name);
    RF_CHECK(rf__attrs_set(&retvals[i]->attrs, RF_FETCH_NODE_ATTR, &f));
    RF_CHECK(rf__attrs_set(&retvals[i]->attrs, RF_FETCH_OP_ATTR, &fop));
  }
  return NULL;
}

/* Points every consumer of fed output i at a new _Arg (on the fed node's
 * requested device, with its inferred shape). tmp is scratch. */
static rf_status *add_arg(rf_graph *g, const rf__signature *sig, int i,
                          scratch *tmp) {
  rf_node *src = g->nodes[sig->feeds[i].node->id];
  int idx = sig->feeds[i].index;
  char base[512];
  snprintf(base, sizeof base, "_arg/%s_%d", src->name, idx);
  rf_node *arg;
  RF_CHECK(add_indexed(g, "_Arg", base, src->requested_device, NULL, 0,
                       src->out_dtypes[idx], i, &arg));
  arg->out_shapes[0] = src->out_shapes[idx];
  rf__attr_value f = rf__attr_string_ref(src->name);
  rf__attr_value fop = rf__attr_string_ref(src->op->name);
  RF_CHECK(rf__attrs_set(&arg->attrs, RF_FEED_NODE_ATTR, &f));
  RF_CHECK(rf__attrs_set(&arg->attrs, RF_FEED_OP_ATTR, &fop));
  int n = 0;
  for (int k = 0; k < src->num_out_edges; k++) {
    if (src->out_edges[k]->src_out != idx) continue;
    if (scratch_reserve(tmp, n + 1)) return rf__oom();
    tmp->edges[n] = src->out_edges[k];
    tmp->srcs[n] = arg;
    tmp->outs[n++] = 0;
  }
  return rf__graph_redirect_edges(g, src, tmp->edges, tmp->srcs, tmp->outs, n);
}

static rf_status *rewrite_io(rf_graph *g, const rf__signature *sig) {
  rf_node **retvals = rf__malloc(
      sizeof(rf_node *) * (size_t)(sig->num_fetches ? sig->num_fetches : 1));
  RF_CHECK_ALLOC(retvals);
  scratch tmp = {0};
  char *keep = NULL;
  rf_status *st = NULL;
  RF_CHECK_GOTO(add_retvals(g, sig, retvals), st, done);
  for (int i = 0; i < sig->num_feeds; i++)
    RF_CHECK_GOTO(add_arg(g, sig, i, &tmp), st, done);
  keep = rf__calloc((size_t)(g->num_ids ? g->num_ids : 1), 1);
  if (!keep) {
    st = rf__oom();
    goto done;
  }
  for (int i = 0; i < sig->num_fetches; i++) keep[retvals[i]->id] = 1;
  for (int i = 0; i < sig->num_targets; i++) keep[sig->targets[i]->id] = 1;
  st = rf__prune(g, keep);
done:
  rf__free(retvals);
  rf__free(tmp.edges);
  rf__free(tmp.srcs);
  rf__free(tmp.outs);
  rf__free(keep);
  return st;
}

/* The session's wire dtype of float32 all-reduces (a name checked by
 * rf_session_new; NULL: float32). */
static rf_dtype comm_dtype(const rf_session *s) {
  const char *name = s->opts.collective_comm_dtype;
  return name ? rf_dtype_from_name(name) : RF_FLOAT32;
}

/* The passes see every device of the job (this process's first); the
 * executor only this process's. */
static rf__pass_ctx pass_ctx(rf_session *s, rf_graph *g, long compile) {
  return (rf__pass_ctx){.graph = g,
                        .devices = s->devices,
                        .num_devices = s->num_job_devices,
                        .default_device = s->default_device,
                        .task = s->task,
                        .num_tasks = s->num_tasks,
                        .compile = compile,
                        .bucket_bytes = s->opts.collective_bucket_bytes,
                        .narrow_comm = comm_dtype(s) != RF_FLOAT32,
                        .comm_dtype = comm_dtype(s),
                        .group_updates = s->opts.group_optimizer_updates,
                        .matmul_epilogues = s->opts.matmul_epilogues,
                        .conv_epilogues = s->opts.conv_epilogues};
}

rf_status *rf__session_check_devices(rf_session *s) {
  rf__pass_ctx ctx = pass_ctx(s, s->graph, 0);
  return rf__check_requested_devices(&ctx);
}

static rf_status *pre_placement(rf__pass_ctx *ctx) {
  return rf__passes_run(RF_PASS_PRE_PLACEMENT, ctx);
}
static rf_status *post_placement(rf__pass_ctx *ctx) {
  return rf__passes_run(RF_PASS_POST_PLACEMENT, ctx);
}
static rf_status *post_partition(rf__pass_ctx *ctx) {
  RF_CHECK(rf__passes_run(RF_PASS_POST_PARTITION, ctx));
  return rf__check_host_memory(ctx);
}

/* The phases after pruning, in order (each logged and dumped before and
 * after); rf_graph_lower runs the first LOWER_PHASES. */
static const struct {
  const char *name;
  rf_status *(*run)(rf__pass_ctx *ctx);
} phases[] = {
    {"pre_placement", pre_placement},   {"placement", rf__place},
    {"post_placement", post_placement}, {"host_memory", rf__place_host_memory},
    {"task_split", rf__split_tasks},    {"partition", rf__partition},
    {"post_partition", post_partition},
};
#define NUM_PHASES ((int)(sizeof phases / sizeof *phases))
#define LOWER_PHASES 4

/* Phase i is number i + 1 in the dumps: 00 is pruning. */
static rf_status *run_phases(rf__pass_ctx *ctx, int n,
                             const rf__graph_dump *dump) {
  for (int i = 0; i < n; i++) {
    RF_CHECK(
        rf__graph_dump_phase(dump, ctx->graph, i + 1, phases[i].name, false));
    int before = ctx->graph->num_live;
    RF_CHECK(phases[i].run(ctx));
    RF__LOG(RF_LOG_DEBUG, "compile %ld: phase %s: %d nodes before, %d after",
            ctx->compile, phases[i].name, before, ctx->graph->num_live);
    RF_CHECK(
        rf__graph_dump_phase(dump, ctx->graph, i + 1, phases[i].name, true));
  }
  return NULL;
}

/* "compile N: 14 nodes on 2 devices: cpu:0 8, cpu:1 6" (this process's
 * part after partition). */
static void log_partition_sizes(const rf_session *s, const rf_graph *g,
                                long compile) {
  int *count = rf__calloc((size_t)s->num_job_devices + 1, sizeof *count);
  if (!count) return; /* a log line is not worth an error */
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *n = g->nodes[id];
    if (n && n->assigned_device >= 0 && n->assigned_device < s->num_job_devices)
      count[n->assigned_device]++;
  }
  char list[2048] = "";
  size_t used = 0;
  int used_devices = 0;
  for (int d = 0; d < s->num_job_devices; d++) {
    if (!count[d]) continue;
    used_devices++;
    if (used < sizeof list)
      used +=
          (size_t)snprintf(list + used, sizeof list - used, "%s%s %d",
                           used ? ", " : "", s->devices[d].canonical, count[d]);
  }
  rf__log_write(RF_LOG_INFO, "compile %ld: %d nodes on %d devices: %s", compile,
                g->num_live, used_devices, list);
  rf__free(count);
}

/* Lists the GPU devices of the plan (synchronised after every step unless
 * it pipelines) and whether a feed is placed on one of them. */
static rf_status *find_gpus(const rf_session *s, rf__plan *p) {
  for (int id = 0; id < p->graph->num_ids; id++) {
    const rf_node *n = p->graph->nodes[id];
    if (n && n->assigned_device >= 0 &&
        s->devices[n->assigned_device].name.type == RF_DEVICE_GPU &&
        strcmp(n->op->name, "_Arg") == 0)
      p->gpu_feeds = true;
  }
  int n = rf__executor_num_devices(p->executor);
  for (int i = 0; i < n; i++) {
    rf__device *d = rf__executor_device(p->executor, i);
    if (d->name.type != RF_DEVICE_GPU) continue;
    if (!p->gpus) {
      p->gpus = rf__malloc(sizeof(rf__device *) * (size_t)n);
      RF_CHECK_ALLOC(p->gpus);
    }
    p->gpus[p->num_gpus++] = d;
  }
  return NULL;
}

/* In a job, a feed for another task's node is an error even when this
 * task's part does not need it (its _Arg would just be pruned). */
static rf_status *check_feeds(const rf_session *s, const rf__signature *sig) {
  for (int i = 0; s->num_tasks > 1 && i < sig->num_feeds; i++) {
    const rf_node *n = sig->feeds[i].node;
    rf__device_name d = {-1, RF_DEVICE_CPU, 0};
    if (n->requested_device && n->requested_device[0])
      rf_status_free(rf__device_name_parse(n->requested_device, &d));
    if (d.task < 0 || d.task == s->task) continue;
    return rf__invalid(
        "feed for node '%s' (%s) on %s: a process feeds only nodes of its "
        "own task (task %d)",
        n->name, n->op->name, n->requested_device, s->task);
  }
  return NULL;
}

rf_status *rf__compile(rf_session *s, const rf__signature *sig,
                       rf__plan **out) {
  RF_CHECK(check_feeds(s, sig));
  long compile = atomic_fetch_add(&next_compile, 1);
  RF__LOG(RF_LOG_DEBUG,
          "compile %ld: %d feeds, %d fetches, %d targets of a %d-node graph",
          compile, sig->num_feeds, sig->num_fetches, sig->num_targets,
          s->graph->num_live);
  rf__graph_dump dump;
  RF_CHECK(rf__graph_dump_begin(&dump, s->opts.dump_graph_dir, compile, s->task,
                                s->num_tasks, s->devices, s->num_job_devices));
  rf__plan *p = rf__calloc(1, sizeof *p);
  rf_status *st = p ? NULL : rf__oom();
  if (st) goto fail;
  p->num_feeds = sig->num_feeds;
  p->num_fetches = sig->num_fetches;
  RF_CHECK_GOTO(rf__graph_copy(s->graph, &p->graph), st, fail);
  rf__pass_ctx ctx = pass_ctx(s, p->graph, compile);
  if (s->num_tasks > 1) { /* before this process's pruning */
    RF_CHECK_GOTO(rf__record_job_broadcasts(&ctx), st, fail);
    RF_CHECK_GOTO(rf__bucket_collectives_plan(&ctx), st, fail);
  }
  RF_CHECK_GOTO(rf__graph_dump_phase(&dump, p->graph, 0, "prune", false), st,
                fail);
  RF_CHECK_GOTO(rewrite_io(p->graph, sig), st, fail);
  RF_CHECK_GOTO(rf__graph_dump_phase(&dump, p->graph, 0, "prune", true), st,
                fail);
  RF_CHECK_GOTO(run_phases(&ctx, NUM_PHASES, &dump), st, fail);
  if (rf__log_on(RF_LOG_INFO)) log_partition_sizes(s, p->graph, compile);
  p->cross_task = rf__has_cross_task_collectives(p->graph);
  RF_CHECK_GOTO(
      rf__executor_new(p->graph, s->devices, s->num_devices, &p->executor), st,
      fail);
  RF_CHECK_GOTO(find_gpus(s, p), st, fail);
#ifdef RF_HAVE_CUDA
  if (s->opts.gpu_graphs && p->num_gpus > 0)
    RF_CHECK_GOTO(rf__step_graph_new(s, p, &p->step_graph), st, fail);
#endif
  rf__graph_dump_end(&dump);
  *out = p;
  return NULL;
fail:
  rf__graph_dump_end(&dump);
  rf__plan_free(p);
  return st;
}

/* Placement and the passes up to POST_PLACEMENT on a copy of g, for looking
 * at (ringflow lower). Requested devices become the assigned ones. */
rf_status *rf_graph_lower(const rf_graph *g, const rf_session_options *opts,
                          rf_graph **out) {
  if (!g || !out) return rf__invalid("rf_graph_lower: NULL argument");
  rf_status *recorded = rf_graph_status(g); /* named as this call's */
  if (recorded)
    return rf__status_prefix(recorded,
                             "rf_graph_lower: the graph holds an error");
  rf_session *s;
  RF_CHECK(rf_session_new(g, opts, &s));
  long compile = atomic_fetch_add(&next_compile, 1);
  rf_graph *copy = NULL;
  rf__pass_ctx ctx = pass_ctx(s, NULL, compile);
  rf__graph_dump dump;
  rf_status *st =
      rf__graph_dump_begin(&dump, s->opts.dump_graph_dir, compile, s->task,
                           s->num_tasks, s->devices, s->num_job_devices);
  if (!st) st = rf__graph_copy(s->graph, &copy);
  ctx.graph = copy;
  if (!st && s->num_tasks > 1) st = rf__record_job_broadcasts(&ctx);
  if (!st && s->num_tasks > 1) st = rf__bucket_collectives_plan(&ctx);
  if (!st) st = run_phases(&ctx, LOWER_PHASES, &dump);
  rf__graph_dump_end(&dump);
  for (int id = 0; !st && id < copy->num_ids; id++) {
    rf_node *n = copy->nodes[id];
    if (n && n->assigned_device >= 0)
      st = rf_node_set_device(n, s->devices[n->assigned_device].canonical);
  }
  rf_session_free(s);
  if (st) {
    rf_graph_free(copy);
    return st;
  }
  *out = copy;
  return NULL;
}
