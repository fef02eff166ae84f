/* passes/placement.c - gives every node an assigned device, in topological
 * order so each node's inputs are placed before it:
 *  1. a requested device, which the session must have;
 *  2. else a resource consumer (first input of dtype resource: ReadVariable,
 *     Assign, Apply*) goes where its variable lives;
 *  3. else the device of its first data input;
 *  4. else the session's default device.
 * Rule 2 is rule 3 for such nodes, and must stay so: a variable's state
 * exists on one device only, so nothing may move its users elsewhere. */
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
enum rule { REQUESTED, VARIABLE, INPUT, DEFAULT, NUM_RULES };
static const char *const rule_names[] = {"requested", "its variable",
                                         "its first input", "default device"};

static void log_placed(const rf__pass_ctx *ctx, const rf_node *v,
                       enum rule why) {
  const rf_node *src = why == VARIABLE || why == INPUT ? v->data_in[0]->src : 0;
  rf__log_write(RF_LOG_DEBUG,
                "place: compile %ld: node '%.200s' (%s) on %s: %s%s%.200s%s",
                ctx->compile, v->name, v->op->name,
                ctx->devices[v->assigned_device].canonical, rule_names[why],
                src ? " '" : "", src ? src->name : "", src ? "' is there" : "");
}

rf_status *rf__place(rf__pass_ctx *ctx) {
  rf_node **order = NULL;
  int n = 0;
  RF_CHECK(rf__topological_order(ctx->graph, &order, &n));
  resolver r = {ctx, "", -1};
  rf_status *st = NULL;
  bool debug = rf__log_on(RF_LOG_DEBUG);
  int by_rule[NUM_RULES] = {0};
  for (int i = 0; i < n; i++) {
    rf_node *v = order[i];
    int dev;
    if ((st = resolve(&r, v, &dev))) break;
    enum rule why = REQUESTED;
    /* Rules 2 and 3 at once: a resource consumer's input 0 is its variable. */
    if (dev < 0 && v->num_inputs > 0 && v->data_in[0]) {
      const rf__edge *e = v->data_in[0];
      dev = e->src->assigned_device;
      why = e->src->out_dtypes[e->src_out] == RF_RESOURCE ? VARIABLE : INPUT;
    }
    if (dev < 0) dev = ctx->default_device, why = DEFAULT;
    v->assigned_device = dev;
    by_rule[why]++;
    if (debug) log_placed(ctx, v, why);
  }
  rf__free(order);
  if (!st)
    RF__LOG(RF_LOG_INFO,
            "place: compile %ld: %d nodes: %d requested, %d by variable, %d "
            "by input, %d on the default device %s",
            ctx->compile, n, by_rule[REQUESTED], by_rule[VARIABLE],
            by_rule[INPUT], by_rule[DEFAULT],
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
