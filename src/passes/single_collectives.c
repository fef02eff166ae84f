/* passes/single_collectives.c - the POST_PLACEMENT pass, run before buckets
 * and lowering, that turns a collective with one participant into Identity
 * (docs/COLLECTIVES.md, "One participant"). A model written for N devices
 * and run on one (`ringflow train --devices gpu:0`) all-reduces each
 * gradient over a single device: the result is the input (sum, prod, min,
 * max and avg of one value are that value, bit for bit; all-gather and
 * reduce-scatter over one device keep the whole tensor), so nothing needs
 * to run. Before this pass such a step still ran the collective: a copy of
 * every gradient, one kernel on a GPU, each step.
 *
 * Rewritten, in a session of one process only (a job's processes decide
 * their collectives together, before pruning):
 *   - AllReduce, AllGather and ReduceScatter whose num_devices is 1 and
 *     whose shared_name no other participant of the graph has;
 *   - Reduce with one input on its own device.
 * Left alone, for the checks after lowering to report or the bucket pass to
 * narrow: a group whose count disagrees with num_devices, a Reduce whose
 * input is elsewhere, a float32 all-reduce that a narrower wire dtype (the
 * session's collective_comm_dtype or its own comm_dtype attr) would round,
 * and any all-reduce with a comm_dtype attr other than float32 (which the
 * bucket pass refuses on one not of float32). The node keeps its name, device
 * and edges and becomes Identity, which forwards its input tensor: no copy, no
 * kernel. Environment variable RF_SINGLE_COLLECTIVES=keep turns the pass off
 * (for measuring it). */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "graph/graph.h"
#include "ops/op_registry.h"
#include "passes/node_match.h"
#include "passes/lower_collectives.h"
#include "passes/single_collectives.h"

/* Whether the bucket pass has business with all-reduce n: a float32 one
 * whose values a narrower wire dtype would round (its comm_dtype attr;
 * "auto": the session's), or a comm_dtype attr other than float32, which
 * that pass checks (INVALID_ARGUMENT on an all-reduce not of float32). */
static bool for_the_wire(const rf__pass_ctx *ctx, const rf_node *n) {
  const rf__attr_value *v = rf__attrs_find(&n->attrs, "comm_dtype");
  const char *attr = "auto";
  if (v && v->type == RF_ATTR_STRING) attr = v->u.s;
  if (strcmp(attr, "auto") == 0)
    return ctx->narrow_comm && n->out_dtypes[0] == RF_FLOAT32;
  return strcmp(attr, "float32") != 0;
}

/* Whether n is a collective of one participant that may become Identity. */
static bool single(const rf__pass_ctx *ctx, const rf_node *n,
                   const rf__collective_groups *groups) {
  if (rf__node_is(n, "Reduce")) {
    const rf__edge *e = n->num_inputs == 1 ? n->data_in[0] : NULL;
    return e && e->src->assigned_device == n->assigned_device &&
           n->assigned_device >= 0;
  }
  bool all_reduce = rf__node_is(n, "AllReduce");
  if (!all_reduce && !rf__node_is(n, "AllGather") &&
      !rf__node_is(n, "ReduceScatter"))
    return false;
  int64_t want = 0;
  const char *name = NULL;
  rf_status *st = rf__attrs_get_int(&n->attrs, "num_devices", &want);
  if (!st) st = rf__attrs_get_string(&n->attrs, "shared_name", &name);
  if (st) { /* malformed: the group checks report it */
    rf_status_free(st);
    return false;
  }
  if (want != 1 || rf__collective_group_size(groups, name) != 1 ||
      n->assigned_device < 0)
    return false;
  return !(all_reduce && for_the_wire(ctx, n));
}

static rf_status *to_identity(rf_node *n, const rf__op_def *identity) {
  rf__attrs a = {0};
  rf__attr_value t = rf__attr_type_value(n->out_dtypes[0]);
  rf_status *st = rf__attrs_set(&a, "T", &t);
  if (st) {
    rf__attrs_clear(&a);
    return st;
  }
  RF__LOG(RF_LOG_INFO,
          "collective '%.200s' (%s) on its one device runs as Identity: its "
          "output is its input, nothing is communicated",
          n->name, n->op->name);
  rf__attrs_clear(&n->attrs);
  n->attrs = a;
  n->op = identity;
  return NULL;
}

rf_status *rf__single_collectives(rf__pass_ctx *ctx) {
  if (ctx->num_tasks > 1) return NULL;
  const char *env = getenv("RF_SINGLE_COLLECTIVES");
  if (env && strcmp(env, "keep") == 0) return NULL;
  const rf__op_def *identity = rf__op_find("Identity");
  if (!identity) return rf__internal("op Identity is not registered");
  rf_graph *g = ctx->graph;
  rf__collective_groups *groups;
  RF_CHECK(rf__collective_groups_new(g, &groups));
  rf_status *st = NULL;
  for (int id = 0; id < g->num_ids && !st; id++) {
    rf_node *n = g->nodes[id];
    if (n && n->num_outputs == 1 && single(ctx, n, groups))
      st = to_identity(n, identity);
  }
  rf__collective_groups_free(groups);
  return st;
}
