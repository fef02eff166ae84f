/* passes/host_memory.c - host-memory arguments of GPU kernels (a shape, a
 * count: rf__kernel_def.host_memory_inputs/outputs). Before partition, small
 * int32 and int64 producers (shape vectors) whose every consumer wants host
 * memory move to cpu:0, so their values never visit the GPU (TensorFlow's
 * rule); after partition, each host-memory input is checked to really come from
 * host memory. Both stages only read kernel defs and the placement, and are
 * linear in the edges. */
#include <string.h>

#include "core/log.h"
#include "kernels/kernel.h"
#include "ops/op_registry.h"
#include "passes/pass_registry.h"

static bool on_gpu(const rf__pass_ctx *ctx, int dev) {
  return dev >= 0 && dev < ctx->num_devices &&
         ctx->devices[dev].name.type == RF_DEVICE_GPU;
}

/* Input `in` of node n on a GPU device is a host-memory argument. */
static bool gpu_host_input(const rf__pass_ctx *ctx, const rf_node *n, int in) {
  if (in < 0 || in >= 32 || !on_gpu(ctx, n->assigned_device)) return false;
  const rf__kernel_def *k = rf__kernel_find(n->op->name, RF_DEVICE_GPU);
  return k && (k->host_memory_inputs >> in & 1u);
}

/* Every output of n's GPU kernel is host memory already (Shape). */
static bool outputs_host_already(const rf_node *n) {
  const rf__kernel_def *k = rf__kernel_find(n->op->name, RF_DEVICE_GPU);
  if (!k || n->num_outputs > 32) return false;
  uint32_t all =
      n->num_outputs == 32 ? 0xffffffffu : ((1u << n->num_outputs) - 1u);
  return (k->host_memory_outputs & all) == all;
}

static bool may_move(const rf__pass_ctx *ctx, const rf_node *v) {
  if (!on_gpu(ctx, v->assigned_device) || v->num_outputs == 0) return false;
  /* _Arg is marked stateful (internal) but is a plain value. */
  if ((v->op->flags & (RF_OP_STATEFUL | RF_OP_GROUPED)) &&
      strcmp(v->op->name, "_Arg") != 0)
    return false;
  for (int i = 0; i < v->num_outputs; i++)
    if (v->out_dtypes[i] != RF_INT32 && v->out_dtypes[i] != RF_INT64)
      return false;
  for (int i = 0; i < v->num_inputs; i++) {
    const rf__edge *e = v->data_in[i];
    if (e && e->src->out_dtypes[e->src_out] == RF_RESOURCE) return false;
  }
  if (outputs_host_already(v) || !rf__kernel_find(v->op->name, RF_DEVICE_CPU))
    return false;
  int host_inputs = 0;
  for (int k = 0; k < v->num_out_edges; k++) {
    const rf__edge *e = v->out_edges[k];
    if (e->src_out == RF_CONTROL_SLOT) continue;
    if (gpu_host_input(ctx, e->dst, e->dst_in))
      host_inputs++;
    else if (on_gpu(ctx, e->dst->assigned_device))
      return false; /* a consumer wants it in device memory */
  }
  return host_inputs > 0;
}

rf_status *rf__place_host_memory(rf__pass_ctx *ctx) {
  bool any_gpu = false;
  int cpu0 = -1;
  for (int i = 0; i < ctx->num_devices; i++) {
    const rf__device_name *d = &ctx->devices[i].name;
    if (d->type == RF_DEVICE_GPU) any_gpu = true;
    if (d->type == RF_DEVICE_CPU && d->index == 0 && cpu0 < 0) cpu0 = i;
  }
  if (!any_gpu || cpu0 < 0) return NULL;
  rf_node **order = NULL;
  int n = 0;
  RF_CHECK(rf__topological_order(ctx->graph, &order, &n));
  /* Consumers first: a node moved to the host makes its own int32 inputs
   * host-memory consumers' inputs only if they qualify by themselves. */
  for (int i = n - 1; i >= 0; i--) {
    rf_node *v = order[i];
    if (!may_move(ctx, v)) continue;
    RF__LOG(RF_LOG_DEBUG,
            "place: compile %ld: node '%.200s' (%s) moves from %s to %s: its "
            "consumers read it in host memory",
            ctx->compile, v->name, v->op->name,
            ctx->devices[v->assigned_device].canonical,
            ctx->devices[cpu0].canonical);
    v->assigned_device = cpu0;
  }
  rf__free(order);
  return NULL;
}

/* Where input `in` of n comes from is host memory. */
static bool source_in_host_memory(const rf__pass_ctx *ctx, const rf__edge *e) {
  const rf_node *src = e->src;
  if (!on_gpu(ctx, src->assigned_device)) return true;
  if (strcmp(src->op->name, "_Recv") == 0) {
    bool host = false;
    if (rf__attrs_find(&src->attrs, "host_memory"))
      (void)rf__attrs_get_bool(&src->attrs, "host_memory", &host);
    return host;
  }
  const rf__kernel_def *k = rf__kernel_find(src->op->name, RF_DEVICE_GPU);
  return k && e->src_out < 32 && (k->host_memory_outputs >> e->src_out & 1u);
}

rf_status *rf__check_host_memory(rf__pass_ctx *ctx) {
  rf_graph *g = ctx->graph;
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *v = g->nodes[id];
    if (!v || !on_gpu(ctx, v->assigned_device)) continue;
    const rf__kernel_def *k = rf__kernel_find(v->op->name, RF_DEVICE_GPU);
    if (!k || !k->host_memory_inputs) continue;
    for (int in = 0; in < v->num_inputs && in < 32; in++) {
      const rf__edge *e = v->data_in[in];
      if (!(k->host_memory_inputs >> in & 1u) || !e ||
          source_in_host_memory(ctx, e))
        continue;
      return rf__invalid(
          "node '%s' (%s) on %s reads input %d from host memory, but node "
          "'%s' (%s) produces it in device memory on %s (only int32 and int64 "
          "producers move to the host by themselves)",
          v->name, v->op->name, ctx->devices[v->assigned_device].canonical, in,
          e->src->name, e->src->op->name,
          ctx->devices[e->src->assigned_device].canonical);
    }
  }
  return NULL;
}
