/* passes/placement.c - gives every node an assigned device, in topological
 * order so each node's inputs are placed before it:
 *  1. a requested device, which the session must have;
 *  2. else a resource consumer (first input of dtype resource: ReadVariable,
 *     Assign, Apply*) goes where its variable lives;
 *  3. else the device of its first data input that has one of its own (a
 *     requested device, or one it took by rules 2 and 3), else of its first
 *     data input;
 *  4. else the session's default device.
 * A node placed by rule 4, or by rule 3 after inputs that all were, has no
 * device of its own ("floating"). Last, a floating Const whose consumers
 * all run on one other device moves there: `2 * x` with x on cpu:1 runs
 * on cpu:1 with its 2 (as `x * 2` does), not on the default device.
 * Rule 2 must stay first: a variable's state exists on one device only, so
 * nothing may move its users elsewhere. */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ops/op_registry.h"
#include "passes/pass_registry.h"

#ifdef RF_HAVE_MPI
#define NO_JOB_HINT \
  ": start the program with mpirun or srun to run several processes"
#else
#define NO_JOB_HINT ": ringflow was built without MPI"
#endif

/* Resolves a node's requested device; *dev = -1 when it requests none. The
 * previous string and result are cached: most graphs repeat a few names. */
typedef struct resolver {
  const rf__pass_ctx *ctx;
  char last[RF_DEVICE_NAME_MAX];
  int last_dev;
} resolver;

static rf_status *resolve(resolver *r, const rf_node *n, int *dev) {
  const char *req = n->requested_device ? n->requested_device : "";
  *dev = -1;
  if (!*req) return NULL;
  if (r->last_dev >= 0 && strcmp(req, r->last) == 0) {
    *dev = r->last_dev;
    return NULL;
  }
  rf__device_name name;
  rf_status *st = rf__device_name_parse(req, &name);
  if (st) return rf__status_prefix(st, "node '%s' (%s)", n->name, n->op->name);
  int d = rf__device_find(r->ctx->devices, r->ctx->num_devices, &name);
  int tasks = r->ctx->num_tasks > 1 ? r->ctx->num_tasks : 1;
  if (d < 0 && name.task >= tasks)
    return rf__invalid(
        "node '%s' (%s) requests device %s, but the session is %s (task "
        "%d of %d)%s",
        n->name, n->op->name, req,
        tasks > 1 ? "a job of fewer tasks" : "one process", r->ctx->task, tasks,
        tasks > 1 ? "" : NO_JOB_HINT);
  if (d < 0) {
    char list[512];
    rf__device_list_format(r->ctx->devices, r->ctx->num_devices, list,
                           sizeof list);
    int nd = r->ctx->num_devices;
    return rf__invalid(
        "node '%s' (%s) requests device %s, but the session "
        "has %s (%d device%s)",
        n->name, n->op->name, req, list, nd, nd == 1 ? "" : "s");
  }
  if (strlen(req) < sizeof r->last) {
    strcpy(r->last, req);
    r->last_dev = d;
  }
  *dev = d;
  return NULL;
}

/* Why a node went where it did, for the log. */
enum rule { REQUESTED, VARIABLE, INPUT, DEFAULT, CONSUMERS, NUM_RULES };
static const char *const rule_names[] = {"requested", "its variable",
                                         "its first input", "default device",
                                         "its consumers"};

/* src: the input that placed v (VARIABLE, INPUT: input k) or one consumer
 * (CONSUMERS). */
static void log_placed(const rf__pass_ctx *ctx, const rf_node *v, enum rule why,
                       const rf_node *src, int k) {
  char input[48] = "";
  if (why == INPUT && k > 0)
    snprintf(input, sizeof input, "its input %d (the first with a device)", k);
  rf__log_write(RF_LOG_DEBUG,
                "place: compile %ld: node '%.200s' (%s) on %s: %s%s%.200s%s",
                ctx->compile, v->name, v->op->name,
                ctx->devices[v->assigned_device].canonical,
                input[0] ? input : rule_names[why], src ? " '" : "",
                src ? src->name : "", src ? "' is there" : "");
}

rf_status *rf__place(rf__pass_ctx *ctx) {
  rf_node **order = NULL;
  int n = 0;
  RF_CHECK(rf__topological_order(ctx->graph, &order, &n));
  bool *floating =
      rf__calloc((size_t)ctx->graph->num_ids + 1, sizeof *floating);
  if (!floating) {
    rf__free(order);
    return rf__oom();
  }
  resolver r = {ctx, "", -1};
  rf_status *st = NULL;
  bool debug = rf__log_on(RF_LOG_DEBUG);
  int by_rule[NUM_RULES] = {0};
  for (int i = 0; i < n; i++) {
    rf_node *v = order[i];
    int dev;
    if ((st = resolve(&r, v, &dev))) break;
    enum rule why = REQUESTED;
    const rf_node *src = NULL;
    int from = 0; /* the input that placed v */
    if (dev < 0 && v->num_inputs > 0 && v->data_in[0]) {
      const rf__edge *e = v->data_in[0];
      if (e->src->out_dtypes[e->src_out] == RF_RESOURCE) { /* rule 2 */
        why = VARIABLE;
      } else { /* rule 3: the first input with a device of its own */
        why = INPUT;
        for (int k = 0; k < v->num_inputs; k++)
          if (v->data_in[k] && !floating[v->data_in[k]->src->id]) {
            e = v->data_in[k];
            from = k;
            break;
          }
        floating[v->id] = floating[e->src->id];
      }
      src = e->src;
      dev = src->assigned_device;
    }
    if (dev < 0) dev = ctx->default_device, why = DEFAULT;
    if (why == DEFAULT) floating[v->id] = true;
    v->assigned_device = dev;
    by_rule[why]++;
    if (debug) log_placed(ctx, v, why, src, from);
  }
  /* Floating Consts join their consumers when those agree on a device. */
  for (int i = 0; !st && i < n; i++) {
    rf_node *v = order[i];
    if (!floating[v->id] || v->num_inputs > 0 || strcmp(v->op->name, "Const"))
      continue;
    int dev = -1;
    const rf_node *one = NULL;
    for (int k = 0; k < v->num_out_edges; k++) {
      const rf__edge *e = v->out_edges[k];
      if (e->src_out == RF_CONTROL_SLOT) continue;
      if (dev >= 0 && e->dst->assigned_device != dev) {
        dev = -2;
        break;
      }
      dev = e->dst->assigned_device;
      one = e->dst;
    }
    if (dev < 0 || dev == v->assigned_device) continue;
    v->assigned_device = dev;
    by_rule[DEFAULT]--;
    by_rule[CONSUMERS]++;
    if (debug) log_placed(ctx, v, CONSUMERS, one, 0);
  }
  rf__free(floating);
  rf__free(order);
  if (!st)
    RF__LOG(RF_LOG_INFO,
            "place: compile %ld: %d nodes: %d requested, %d by variable, %d "
            "by input, %d by consumers, %d on the default device %s",
            ctx->compile, n, by_rule[REQUESTED], by_rule[VARIABLE],
            by_rule[INPUT], by_rule[CONSUMERS], by_rule[DEFAULT],
            ctx->devices[ctx->default_device].canonical);
  return st;
}

rf_status *rf__check_requested_devices(const rf__pass_ctx *ctx) {
  resolver r = {ctx, "", -1};
  for (int id = 0; id < ctx->graph->num_ids; id++) {
    const rf_node *n = ctx->graph->nodes[id];
    int dev;
    if (n) RF_CHECK(resolve(&r, n, &dev));
  }
  return NULL;
}
