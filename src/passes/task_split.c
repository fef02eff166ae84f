/* passes/task_split.c - keeps this task's part of a job's graph (comm/job.h).
 * Every process of a job compiles the whole job's graph: placement, lowering
 * and the collective checks see every task's nodes, so they decide the same
 * on every process. Then the other tasks' nodes leave, before partition.
 * Control edges between tasks are dropped (a process orders only its own
 * nodes; collectives are what synchronises processes); a data edge between
 * tasks is an error: tensors cross processes only through collectives,
 * checked on every edge (between two other tasks' nodes too), so every
 * process of the job refuses the same graph. A target on another task is
 * fine: it asks this process for its part of what the target needs (a
 * Reduce's senders, say). Linear in nodes plus edges. */
#include <stdio.h>
#include <string.h>

#include "ops/op_registry.h"
#include "passes/lower_collectives.h"
#include "passes/pass_registry.h"

static bool is_remote(const rf__pass_ctx *ctx, const rf_node *n) {
  return n->assigned_device >= 0 && n->assigned_device < ctx->num_devices &&
         ctx->devices[n->assigned_device].remote;
}

static const char *dev(const rf__pass_ctx *ctx, const rf_node *n) {
  return ctx->devices[n->assigned_device].canonical;
}

/* Feeds and fetches are made by this process: they must be its nodes. */
static rf_status *check_io(const rf__pass_ctx *ctx, const rf_node *n) {
  if (strcmp(n->op->name, "_Retval") == 0 && n->num_inputs > 0) {
    const rf_node *src = rf__input(n, 0).node;
    const rf__attr_value *f = rf__attrs_find(&n->attrs, RF_FETCH_NODE_ATTR);
    const rf__attr_value *fop = rf__attrs_find(&n->attrs, RF_FETCH_OP_ATTR);
    bool asked =
        f && fop && f->type == RF_ATTR_STRING && fop->type == RF_ATTR_STRING;
    return rf__invalid(
        "fetch of node '%s' (%s) on %s: a process fetches only outputs of "
        "its own task (task %d)",
        asked ? f->u.s : src->name, asked ? fop->u.s : src->op->name,
        dev(ctx, n), ctx->task);
  }
  if (strcmp(n->op->name, "_Arg") == 0)
    return rf__invalid(
        "feed '%s' is for a node on %s: a process feeds only nodes of its "
        "own task (task %d)",
        n->name, dev(ctx, n), ctx->task);
  return NULL;
}

static int task_of(const rf__pass_ctx *ctx, const rf_node *n) {
  return n->assigned_device >= 0 && n->assigned_device < ctx->num_devices
             ? ctx->devices[n->assigned_device].name.task
             : ctx->task;
}

/* The node the caller knows: a fed output's _Arg stands for the fed node. */
static void shown(const rf_node *n, const char **name, const char **op) {
  const rf__attr_value *f = rf__attrs_find(&n->attrs, RF_FEED_NODE_ATTR);
  const rf__attr_value *fop = rf__attrs_find(&n->attrs, RF_FEED_OP_ATTR);
  bool fed =
      f && fop && f->type == RF_ATTR_STRING && fop->type == RF_ATTR_STRING;
  *name = fed ? f->u.s : n->name;
  *op = fed ? fop->u.s : n->op->name;
}

/* A data edge into n from a node of another task. */
static rf_status *check_edges(const rf__pass_ctx *ctx, const rf_node *n) {
  for (int i = 0; i < n->num_in_edges; i++) {
    const rf__edge *e = n->in_edges[i];
    if (e->dst_in == RF_CONTROL_SLOT || task_of(ctx, e->src) == task_of(ctx, n))
      continue;
    const char *src, *src_op;
    shown(e->src, &src, &src_op);
    return rf__invalid(
        "node '%s' (%s) on %s reads node '%s' (%s) on %s: tensors cross "
        "processes only through collectives (AllReduce, Reduce, Broadcast, "
        "AllGather, ReduceScatter)",
        n->name, n->op->name, dev(ctx, n), src, src_op, dev(ctx, e->src));
  }
  return NULL;
}

rf_status *rf__record_job_broadcasts(rf__pass_ctx *ctx) {
  RF_CHECK(rf__place(ctx));
  int n = ctx->num_devices;
  rf__device_name *names = rf__malloc(sizeof *names * (size_t)(n ? n : 1));
  RF_CHECK_ALLOC(names);
  for (int i = 0; i < n; i++) names[i] = ctx->devices[i].name;
  rf_status *st = rf__record_broadcast_receivers(ctx->graph, names, n);
  rf__free(names);
  return st;
}

rf_status *rf__split_tasks(rf__pass_ctx *ctx) {
  if (ctx->num_tasks <= 1) return NULL;
  rf_graph *g = ctx->graph;
  char *remove = rf__calloc((size_t)(g->num_ids ? g->num_ids : 1), 1);
  RF_CHECK_ALLOC(remove);
  rf_status *st = NULL;
  int n_remove = 0;
  for (int id = 0; id < g->num_ids && !st; id++) {
    const rf_node *n = g->nodes[id];
    if (!n) continue;
    st = check_edges(ctx, n);
    if (st || !is_remote(ctx, n)) continue;
    st = check_io(ctx, n);
    remove[id] = 1;
    n_remove++;
  }
  if (!st && n_remove) rf__graph_remove_nodes(g, remove);
  rf__free(remove);
  return st;
}
