/* passes/partition.c - cuts the placed graph into one part per device.
 * Each data edge crossing devices goes through a _Send on the source's device
 * and a _Recv on the consumer's; one pair per (source output, destination
 * device), shared by all consumers there. A crossing control edge becomes
 * _Token -> _Send (with a control input from the source) and a _Recv with a
 * control edge to the consumer. Rendezvous keys ("<id>/<src>:<out>;<device>"
 * or "<id>/<src>:ctl;<device>", the name cut at 200 characters) are unique in
 * the graph because node ids are; the name is there for people. Edges into
 * host-memory inputs of GPU kernels get a pair of their own ("...:<out>/host;
 * <device>") whose _Recv has host_memory = true.
 * Linear: each node's out edges are visited once. */
#include <stdio.h>
#include <string.h>

#include "kernels/kernel.h"
#include "ops/op_registry.h"
#include "passes/pass_registry.h"

typedef struct pair {
  int src_out; /* RF_CONTROL_SLOT for control */
  int dev;
  bool host; /* feeds host-memory inputs of GPU kernels */
  rf_node *recv;
} pair;

typedef struct partitioner {
  rf__pass_ctx *ctx;
  const rf__op_def *send, *recv, *token;
  pair *pairs; /* of the node being split */
  int num_pairs, cap_pairs;
  rf__edge **edges; /* its crossing out edges... */
  rf_node **recvs;  /* ...their new sources */
  int *zeros;       /* ...and output indices */
  int cap_edges, cap_recvs, cap_zeros;
} partitioner;

/* A readable unique name like "_Send/x_0/cpu_1" (':' would read as an output
 * index). */
static void make_name(rf_graph *g, const char *kind, const rf_node *src,
                      int out, const char *dev, char *buf, size_t len) {
  char base[512];
  if (out == RF_CONTROL_SLOT)
    snprintf(base, sizeof base, "%s/%s_ctl/%s", kind, src->name, dev);
  else
    snprintf(base, sizeof base, "%s/%s_%d/%s", kind, src->name, out, dev);
  for (char *p = base; *p; p++)
    if (*p == ':') *p = '_';
  rf__graph_unique_name(g, base, buf, len);
}

/* Adds one node on device `dev`, owned by the graph. */
static rf_status *add(partitioner *p, const rf__op_def *op, const char *name,
                      int dev, const rf_output *in, int nin,
                      const rf__attrs *attrs, rf_node **out) {
  const char *dname = p->ctx->devices[dev].canonical;
  RF_CHECK(
      rf__graph_add_node(p->ctx->graph, op, name, dname, in, nin, attrs, out));
  (*out)->assigned_device = dev;
  return NULL;
}

/* True when edge e feeds a host-memory input of a GPU kernel. */
static bool feeds_host_memory(const rf__pass_ctx *ctx, const rf__edge *e) {
  if (e->dst_in == RF_CONTROL_SLOT || e->dst_in >= 32) return false;
  const rf__device *d = &ctx->devices[e->dst->assigned_device];
  if (d->name.type != RF_DEVICE_GPU) return false;
  const rf__kernel_def *k = rf__kernel_find(e->dst->op->name, RF_DEVICE_GPU);
  return k && (k->host_memory_inputs >> e->dst_in & 1u);
}

/* Builds the nodes of one pair; *recv gets the _Recv. */
static rf_status *make_pair(partitioner *p, rf_node *src, int src_out, int dev,
                            bool host, rf_node **recv) {
  rf_graph *g = p->ctx->graph;
  const char *dname = p->ctx->devices[dev].canonical;
  bool control = src_out == RF_CONTROL_SLOT;
  char key[512], name[600];
  if (control)
    snprintf(key, sizeof key, "%d/%.200s:ctl;%s", src->id, src->name, dname);
  else
    snprintf(key, sizeof key, "%d/%.200s:%d%s;%s", src->id, src->name, src_out,
             host ? "/host" : "", dname);
  rf_dtype dtype = control ? RF_FLOAT32 : src->out_dtypes[src_out];
  rf_shape shape =
      control ? rf_shape_of(1, (int64_t)0) : src->out_shapes[src_out];
  rf__attrs attrs = {0};
  rf__attr_value t = rf__attr_type_value(dtype), k = rf__attr_string_ref(key),
                 s = rf__attr_shape(shape);
  rf_status *st = NULL;
  rf_node *send = NULL, *tok = NULL;
  rf_output in = {src, src_out};
  RF_CHECK_GOTO(rf__attrs_set(&attrs, "T", &t), st, done);
  RF_CHECK_GOTO(rf__attrs_set(&attrs, "key", &k), st, done);
  if (control) {
    rf__attrs none = {0};
    make_name(g, "_Token", src, src_out, dname, name, sizeof name);
    RF_CHECK_GOTO(
        add(p, p->token, name, src->assigned_device, NULL, 0, &none, &tok), st,
        done);
    in = (rf_output){tok, 0};
  }
  make_name(g, "_Send", src, src_out, dname, name, sizeof name);
  RF_CHECK_GOTO(
      add(p, p->send, name, src->assigned_device, &in, 1, &attrs, &send), st,
      done);
  if (control)
    RF_CHECK_GOTO(
        rf__graph_add_edge(g, src, RF_CONTROL_SLOT, send, RF_CONTROL_SLOT), st,
        done);
  RF_CHECK_GOTO(rf__attrs_set(&attrs, "shape", &s), st, done);
  if (host) {
    rf__attr_value h = rf__attr_bool(true);
    RF_CHECK_GOTO(rf__attrs_set(&attrs, "host_memory", &h), st, done);
  }
  make_name(g, "_Recv", src, src_out, dname, name, sizeof name);
  RF_CHECK_GOTO(add(p, p->recv, name, dev, NULL, 0, &attrs, recv), st, done);
  (*recv)->out_shapes[0] = shape;
done:
  rf__attrs_clear(&attrs);
  return st;
}

static rf_status *pair_for(partitioner *p, rf_node *src, int src_out, int dev,
                           bool host, rf_node **recv) {
  for (int i = 0; i < p->num_pairs; i++) {
    const pair *q = &p->pairs[i];
    if (q->src_out == src_out && q->dev == dev && q->host == host) {
      *recv = q->recv;
      return NULL;
    }
  }
  if (rf__grow(&p->pairs, &p->cap_pairs, p->num_pairs + 1, sizeof(pair)))
    return rf__oom();
  RF_CHECK(make_pair(p, src, src_out, dev, host, recv));
  p->pairs[p->num_pairs++] = (pair){src_out, dev, host, *recv};
  return NULL;
}

/* A POST_PLACEMENT pass may have added nodes without placing them. */
static rf_status *check_placed(const partitioner *p, const rf_node *v) {
  if (v->assigned_device >= 0 && v->assigned_device < p->ctx->num_devices)
    return NULL;
  return rf__internal("node '%s' (%s) has no device after placement", v->name,
                      v->op->name);
}

static rf_status *split_node(partitioner *p, rf_node *v) {
  RF_CHECK(check_placed(p, v));
  for (int k = 0; k < v->num_out_edges; k++)
    RF_CHECK(check_placed(p, v->out_edges[k]->dst));
  /* Gather the crossing edges and their new sources, then move them all in
   * one pass over v's out edges. */
  int n = 0;
  p->num_pairs = 0;
  for (int k = 0; k < v->num_out_edges; k++) {
    rf__edge *e = v->out_edges[k];
    if (e->dst->assigned_device == v->assigned_device) continue;
    if (rf__grow(&p->edges, &p->cap_edges, n + 1, sizeof(rf__edge *)) ||
        rf__grow(&p->recvs, &p->cap_recvs, n + 1, sizeof(rf_node *)) ||
        rf__grow(&p->zeros, &p->cap_zeros, n + 1, sizeof(int)))
      return rf__oom();
    p->edges[n] = e;
    p->zeros[n] = 0;
    n++;
  }
  /* Pairs are made after gathering: a control pair adds an out edge to v. */
  for (int k = 0; k < n; k++) {
    rf__edge *e = p->edges[k];
    RF_CHECK(pair_for(p, v, e->src_out, e->dst->assigned_device,
                      feeds_host_memory(p->ctx, e), &p->recvs[k]));
  }
  return rf__graph_redirect_edges(p->ctx->graph, v, p->edges, p->recvs,
                                  p->zeros, n);
}

rf_status *rf__partition(rf__pass_ctx *ctx) {
  partitioner p = {.ctx = ctx,
                   .send = rf__op_find("_Send"),
                   .recv = rf__op_find("_Recv"),
                   .token = rf__op_find("_Token")};
  if (!p.send || !p.recv || !p.token)
    return rf__internal(
        "partition: the runtime ops _Send, _Recv and _Token "
        "are not registered");
  rf_graph *g = ctx->graph;
  int ids = g->num_ids; /* nodes added below need no splitting */
  rf_status *st = NULL;
  for (int i = 0; i < ids && !st; i++)
    if (g->nodes[i]) st = split_node(&p, g->nodes[i]);
  rf__free(p.pairs);
  rf__free(p.edges);
  rf__free(p.recvs);
  rf__free(p.zeros);
  return st;
}
