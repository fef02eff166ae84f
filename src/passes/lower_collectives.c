/* passes/lower_collectives.c - the POST_PLACEMENT pass that replaces each
 * Reduce and Broadcast node by per-device participants (docs/COLLECTIVES.md,
 * "Lowering"):
 *
 *   Reduce on D   -> _ReduceRecv on D fed by the input on D, one _ReduceSend
 *                    per other device; consumers read the Recv and get a
 *                    control edge from every Send (a Send has no outputs).
 *   Broadcast on S -> _BroadcastSend on S; consumers on S read the input
 *                    directly; each other consuming device gets one
 *                    _BroadcastRecv whose shape is a Const on that device when
 *                    fully known (int32, int64 when a dim passes INT32_MAX),
 *                    else one Shape node on S (int64). A Broadcast whose
 *                    consumers are all on S is removed.
 *
 * Beyond the reference: several Reduce inputs on one device are summed there
 * first (AddN), so every device takes part once. Control inputs of the
 * original node go to every new node; the shared_name is the original name.
 * Errors name the node and devices and are raised before anything runs. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "graph/graph.h"
#include "ops/op_registry.h"
#include "passes/lower_collectives.h"

typedef struct lower_ctx {
  rf_graph *g;
  const rf__device_name *devices;
  int num_devices;
} lower_ctx;

static const char *dev_name(const lower_ctx *c, int d, char *buf) {
  if (d < 0 || d >= c->num_devices) return "<unplaced>";
  rf__device_name_format(&c->devices[d], buf, RF_DEVICE_NAME_MAX);
  return buf;
}

/* Adds an internal node on device d with attrs; name derived from base. */
static rf_status *add_node(lower_ctx *c, const char *op_name, const char *base,
                           int d, const rf_output *inputs, int n,
                           const rf__attrs *attrs, rf_node **out) {
  const rf__op_def *op = rf__op_find(op_name);
  if (!op) return rf__internal("op %s is not registered", op_name);
  char dev[RF_DEVICE_NAME_MAX];
  size_t len = strlen(base) + strlen(op_name) + 32; /* "base/op_<k>" */
  char *mem = rf__malloc(2 * len), *stem = mem, *name = mem + len;
  RF_CHECK_ALLOC(mem);
  snprintf(stem, len, "%s/%s", base, op_name);
  rf__graph_unique_name(c->g, stem, name, len); /* stem and name apart */
  rf_status *st = rf__graph_add_node(c->g, op, name, dev_name(c, d, dev),
                                     inputs, n, attrs, out);
  rf__free(mem);
  RF_CHECK(st);
  (*out)->assigned_device = d;
  RF__LOG(RF_LOG_DEBUG, "lower: collective '%.200s' gets %s '%.200s' on %s",
          base, op_name, (*out)->name, dev_name(c, d, dev));
  return NULL;
}

/* attrs for a participant: T, num_devices, shared_name, and reduction when
 * the original node has one. */
static rf_status *participant_attrs(const rf_node *orig, int num_devices,
                                    rf__attrs *a) {
  const rf__attr_value *t = rf__attrs_find(&orig->attrs, "T");
  const rf__attr_value *red = rf__attrs_find(&orig->attrs, "reduction");
  if (!t) return rf__internal("node '%s' has no attr T", orig->name);
  rf__attr_value nd = rf__attr_int(num_devices);
  rf__attr_value sn = rf__attr_string_ref(orig->name);
  RF_CHECK(rf__attrs_set(a, "T", t));
  RF_CHECK(rf__attrs_set(a, "num_devices", &nd));
  RF_CHECK(rf__attrs_set(a, "shared_name", &sn));
  if (red) RF_CHECK(rf__attrs_set(a, "reduction", red));
  return NULL;
}

/* Copies orig's control inputs onto n. */
static rf_status *copy_control_inputs(lower_ctx *c, const rf_node *orig,
                                      rf_node *n) {
  for (int i = 0; i < orig->num_in_edges; i++) {
    rf__edge *e = orig->in_edges[i];
    if (e->dst_in == RF_CONTROL_SLOT && !rf__graph_has_control_edge(e->src, n))
      RF_CHECK(rf__graph_add_edge(c->g, e->src, RF_CONTROL_SLOT, n,
                                  RF_CONTROL_SLOT));
  }
  return NULL;
}

static rf_status *control(lower_ctx *c, rf_node *src, rf_node *dst) {
  if (src == dst || rf__graph_has_control_edge(src, dst)) return NULL;
  return rf__graph_add_edge(c->g, src, RF_CONTROL_SLOT, dst, RF_CONTROL_SLOT);
}

static rf_status *check_kinds(lower_ctx *c, const rf_node *n, int a, int b) {
  if (c->devices[a].type == c->devices[b].type) return NULL;
  char da[RF_DEVICE_NAME_MAX], db[RF_DEVICE_NAME_MAX];
  return rf__error(RF_UNIMPLEMENTED,
                   "node '%s' (%s) connects %s and %s: no collective backend "
                   "supports mixed device types",
                   n->name, n->op->name, dev_name(c, a, da),
                   dev_name(c, b, db));
}

/* ---- Reduce ---- */

/* Per device: the (possibly AddN-summed) input of that device. */
typedef struct dev_input {
  int device;
  rf_output value;
} dev_input;

static rf_status *group_reduce_inputs(lower_ctx *c, rf_node *r, dev_input *out,
                                      int *nout) {
  int n = 0;
  for (int k = 0; k < r->num_inputs; k++) {
    rf_output in = rf__input(r, k);
    int d = in.node->assigned_device;
    if (d < 0)
      return rf__internal("input %d of '%s' is not placed", k, r->name);
    RF_CHECK(check_kinds(c, r, r->assigned_device, d));
    int j = 0;
    while (j < n && out[j].device != d) j++;
    if (j < n) continue; /* summed below */
    out[n].device = d;
    out[n].value = in;
    n++;
  }
  for (int j = 0; j < n; j++) { /* sum inputs that share a device */
    rf_output same[RF_MAX_LOWER_INPUTS];
    int k = 0;
    for (int i = 0; i < r->num_inputs; i++)
      if (rf__input(r, i).node->assigned_device == out[j].device)
        same[k++] = rf__input(r, i);
    if (k == 1) continue;
    /* Only a sum can be combined locally with AddN: max of (a+b, c) is not
     * max(a, b, c), and avg would divide by devices, not inputs. */
    const char *red = "sum";
    if (rf__attrs_find(&r->attrs, "reduction"))
      RF_CHECK(rf__attrs_get_string(&r->attrs, "reduction", &red));
    if (strcmp(red, "sum") != 0) {
      char dd[RF_DEVICE_NAME_MAX];
      return rf__error(RF_UNIMPLEMENTED,
                       "node '%s' (Reduce, %s) has %d inputs on %s: only a sum "
                       "combines inputs that share a device; give each input "
                       "its own device",
                       r->name, red, k, dev_name(c, out[j].device, dd));
    }
    rf__attrs a = {0};
    rf__attr_value nv = rf__attr_int(k);
    rf_status *st = rf__attrs_set(&a, "N", &nv);
    const rf__attr_value *t = rf__attrs_find(&r->attrs, "T");
    if (!st) st = rf__attrs_set(&a, "T", t);
    rf_node *sum = NULL;
    if (!st)
      st = add_node(c, "AddN", r->name, out[j].device, same, k, &a, &sum);
    rf__attrs_clear(&a);
    RF_CHECK(st);
    out[j].value.node = sum;
    out[j].value.index = 0;
  }
  *nout = n;
  return NULL;
}

static rf_status *lower_reduce(lower_ctx *c, rf_node *r) {
  char dd[RF_DEVICE_NAME_MAX];
  int D = r->assigned_device;
  if (r->num_inputs > RF_MAX_LOWER_INPUTS)
    return rf__invalid("node '%s' (Reduce) has %d inputs; at most %d", r->name,
                       r->num_inputs, RF_MAX_LOWER_INPUTS);
  dev_input groups[RF_MAX_LOWER_INPUTS];
  int n = 0;
  RF_CHECK(group_reduce_inputs(c, r, groups, &n));
  int own = -1;
  for (int j = 0; j < n; j++)
    if (groups[j].device == D) own = j;
  if (own < 0) { /* as the builder says it (ops/collective_ops.c) */
    char list[512];
    size_t used = 0;
    list[0] = '\0';
    for (int j = 0; j < n && used < sizeof list; j++) {
      char gd[RF_DEVICE_NAME_MAX];
      used +=
          (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                           j ? ", " : "", dev_name(c, groups[j].device, gd));
    }
    return rf__invalid(
        "No input tensor uses the same device as the Reduce op: "
        "node '%s' is on %s, its inputs on %s",
        r->name, dev_name(c, D, dd), list);
  }
  rf__attrs a = {0};
  rf_status *st = participant_attrs(r, n, &a);
  rf_node *recv = NULL, *sends[RF_MAX_LOWER_INPUTS];
  int nsends = 0;
  if (!st)
    st = add_node(c, "_ReduceRecv", r->name, D, &groups[own].value, 1, &a,
                  &recv);
  for (int j = 0; j < n && !st; j++) {
    if (j == own) continue;
    st = add_node(c, "_ReduceSend", r->name, groups[j].device, &groups[j].value,
                  1, &a, &sends[nsends]);
    if (!st) nsends++;
  }
  rf__attrs_clear(&a);
  RF_CHECK(st);
  recv->out_shapes[0] = r->out_shapes[0];
  RF_CHECK(copy_control_inputs(c, r, recv));
  for (int s = 0; s < nsends; s++)
    RF_CHECK(copy_control_inputs(c, r, sends[s]));
  /* Rewire consumers; out_edges shrinks as edges move, so walk from the end. */
  while (r->num_out_edges > 0) {
    rf__edge *e = r->out_edges[r->num_out_edges - 1];
    rf_node *dst = e->dst;
    if (e->src_out == RF_CONTROL_SLOT) {
      RF_CHECK(control(c, recv, dst));
      rf__graph_remove_edge(c->g, e);
    } else {
      RF_CHECK(rf__graph_update_edge(c->g, dst, e->dst_in, recv, 0));
    }
    for (int s = 0; s < nsends; s++) RF_CHECK(control(c, sends[s], dst));
  }
  rf__graph_remove_node(c->g, r);
  return NULL;
}

/* ---- Broadcast ---- */

/* The dtype of a Const holding s: int64 when a dim does not fit in int32
 * (an int32 Const would saturate it and the receiver would expect another
 * shape than the sender's). */
static rf_dtype const_shape_dtype(const rf_shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] > INT32_MAX) return RF_INT64;
  return RF_INT32;
}

/* A receiver's expected shape: a Const on its device, or the sender's Shape
 * (int64: its dims are known only at run time, and may be anything). */
static rf_status *shape_source(lower_ctx *c, rf_node *b, int d, rf_output input,
                               rf_node **shape_node, rf_output *out) {
  rf_shape s = b->out_shapes[0];
  /* A Shape node on the sender cannot feed another process: there the
   * Const holds the known dims and -1 for the others (the receiver takes the
   * sender's shape, checked against these). */
  bool other_task = c->devices[d].task != c->devices[b->assigned_device].task;
  if (other_task && s.rank < 0) {
    char dd[RF_DEVICE_NAME_MAX];
    return rf__invalid(
        "node '%s' (Broadcast) sends a value of unknown rank to %s, another "
        "task: across processes the rank must be known",
        b->name, dev_name(c, d, dd));
  }
  if (rf_shape_is_fully_defined(&s) || other_task) { /* a Const there */
    rf_shape vec = rf_shape_of(1, (int64_t)s.rank);
    rf_dtype type = const_shape_dtype(&s);
    rf_tensor *t;
    RF_CHECK(rf_tensor_new(type, &vec, NULL, &t));
    void *v = rf_tensor_mutable_data(t);
    for (int i = 0; i < s.rank; i++) {
      if (type == RF_INT64)
        ((int64_t *)v)[i] = s.dims[i];
      else
        ((int32_t *)v)[i] = (int32_t)s.dims[i];
    }
    rf__attrs a = {0};
    rf__attr_value tv = rf__attr_tensor_ref(t), dt = rf__attr_type_value(type);
    rf_status *st = rf__attrs_set(&a, "value", &tv);
    if (!st) st = rf__attrs_set(&a, "dtype", &dt);
    rf_node *k = NULL;
    if (!st) st = add_node(c, "Const", b->name, d, NULL, 0, &a, &k);
    rf__attrs_clear(&a);
    rf_tensor_release(t);
    RF_CHECK(st);
    k->out_shapes[0] = vec;
    out->node = k;
    out->index = 0;
    return NULL;
  }
  if (!*shape_node) { /* one Shape node on the sender, shared by all */
    rf__attrs a = {0};
    rf__attr_value ot = rf__attr_type_value(RF_INT64);
    rf__attr_value t = rf__attr_type_value(rf_output_dtype(input));
    rf_status *st = rf__attrs_set(&a, "out_type", &ot);
    if (!st) st = rf__attrs_set(&a, "T", &t);
    if (!st)
      st = add_node(c, "Shape", b->name, b->assigned_device, &input, 1, &a,
                    shape_node);
    rf__attrs_clear(&a);
    RF_CHECK(st);
  }
  out->node = *shape_node;
  out->index = 0;
  return NULL;
}

/* A Broadcast consumed only on its own device disappears. */
static rf_status *remove_broadcast(lower_ctx *c, rf_node *b, rf_output input) {
  char dd[RF_DEVICE_NAME_MAX];
  RF__LOG(RF_LOG_DEBUG,
          "lower: Broadcast '%.200s' removed: every consumer is on its device "
          "%s",
          b->name, dev_name(c, b->assigned_device, dd));
  while (b->num_out_edges > 0) {
    rf__edge *e = b->out_edges[b->num_out_edges - 1];
    rf_node *dst = e->dst;
    if (e->src_out == RF_CONTROL_SLOT) {
      RF_CHECK(control(c, input.node, dst));
      rf__graph_remove_edge(c->g, e);
    } else {
      RF_CHECK(
          rf__graph_update_edge(c->g, dst, e->dst_in, input.node, input.index));
    }
    RF_CHECK(copy_control_inputs(c, b, dst));
  }
  rf__graph_remove_node(c->g, b);
  return NULL;
}

/* In a job every process must lower a Broadcast alike, whatever its own
 * step keeps of the consumers: compile recorded every device consuming it
 * in the whole graph (RF_BROADCAST_RECEIVERS_ATTR), and each gets a
 * receiver (one nobody here reads still takes part). */
static rf_status *add_recorded_receivers(lower_ctx *c, rf_node *b, int *others,
                                         int *nothers) {
  if (!rf__attrs_find(&b->attrs, RF_BROADCAST_RECEIVERS_ATTR)) return NULL;
  const char *list;
  RF_CHECK(rf__attrs_get_string(&b->attrs, RF_BROADCAST_RECEIVERS_ATTR, &list));
  while (*list) {
    size_t k = strcspn(list, ",");
    char name[RF_DEVICE_NAME_MAX + 16];
    snprintf(name, sizeof name, "%.*s", (int)k, list);
    list += k + (list[k] == ',');
    rf__device_name dn;
    RF_CHECK(rf__device_name_parse(name, &dn));
    int d = 0;
    while (d < c->num_devices && !rf__device_name_equal(&c->devices[d], &dn))
      d++;
    if (d == c->num_devices)
      return rf__internal("node '%s' (Broadcast): receiver %s is no device",
                          b->name, name);
    int j = 0;
    while (j < *nothers && others[j] != d) j++;
    if (d == b->assigned_device || j < *nothers) continue;
    RF_CHECK(check_kinds(c, b, b->assigned_device, d));
    if (*nothers == RF_MAX_LOWER_INPUTS)
      return rf__invalid("node '%s' (Broadcast) feeds more than %d devices",
                         b->name, RF_MAX_LOWER_INPUTS);
    others[(*nothers)++] = d;
  }
  return NULL;
}

rf_status *rf__record_broadcast_receivers(rf_graph *g,
                                          const rf__device_name *devices,
                                          int num_devices) {
  for (int id = 0; id < g->num_ids; id++) {
    rf_node *b = g->nodes[id];
    if (!b || strcmp(b->op->name, "Broadcast") != 0) continue;
    size_t len = (size_t)b->num_out_edges * (RF_DEVICE_NAME_MAX + 1) + 1,
           used = 0;
    char *list = rf__malloc(len);
    RF_CHECK_ALLOC(list);
    list[0] = '\0';
    for (int i = 0; i < b->num_out_edges; i++) {
      const rf__edge *e = b->out_edges[i];
      int d = e->dst->assigned_device;
      if (e->src_out == RF_CONTROL_SLOT || d == b->assigned_device || d < 0 ||
          d >= num_devices)
        continue;
      char name[RF_DEVICE_NAME_MAX];
      rf__device_name_format(&devices[d], name, sizeof name);
      bool seen = false; /* few consumers: a scan is fine */
      for (const char *p = list; *p && !seen;) {
        size_t k = strcspn(p, ",");
        seen = k == strlen(name) && strncmp(p, name, k) == 0;
        p += k + (p[k] == ',');
      }
      if (!seen)
        used += (size_t)snprintf(list + used, len - used, "%s%s",
                                 used ? "," : "", name);
    }
    rf__attr_value v = rf__attr_string_ref(list);
    rf_status *st = rf__attrs_set(&b->attrs, RF_BROADCAST_RECEIVERS_ATTR, &v);
    rf__free(list);
    RF_CHECK(st);
  }
  return NULL;
}

static rf_status *lower_broadcast(lower_ctx *c, rf_node *b) {
  int S = b->assigned_device;
  rf_output input = rf__input(b, 0);
  int others[RF_MAX_LOWER_INPUTS], nothers = 0;
  for (int i = 0; i < b->num_out_edges; i++) {
    rf__edge *e = b->out_edges[i];
    int d = e->dst->assigned_device;
    if (e->src_out == RF_CONTROL_SLOT || d == S) continue;
    RF_CHECK(check_kinds(c, b, S, d));
    int j = 0;
    while (j < nothers && others[j] != d) j++;
    if (j < nothers) continue;
    if (nothers == RF_MAX_LOWER_INPUTS)
      return rf__invalid("node '%s' (Broadcast) feeds more than %d devices",
                         b->name, RF_MAX_LOWER_INPUTS);
    others[nothers++] = d;
  }
  RF_CHECK(add_recorded_receivers(c, b, others, &nothers));
  if (nothers == 0) return remove_broadcast(c, b, input);
  rf__attrs a = {0};
  rf_status *st = participant_attrs(b, nothers + 1, &a);
  rf_node *send = NULL, *recvs[RF_MAX_LOWER_INPUTS], *shape_node = NULL;
  if (!st) st = add_node(c, "_BroadcastSend", b->name, S, &input, 1, &a, &send);
  if (!st) st = copy_control_inputs(c, b, send);
  for (int j = 0; j < nothers && !st; j++) {
    rf_output shape;
    st = shape_source(c, b, others[j], input, &shape_node, &shape);
    if (!st) { /* the shape's dtype */
      rf__attr_value ts =
          rf__attr_type_value(shape.node->out_dtypes[shape.index]);
      st = rf__attrs_set(&a, "Tshape", &ts);
    }
    if (!st)
      st = add_node(c, "_BroadcastRecv", b->name, others[j], &shape, 1, &a,
                    &recvs[j]);
    if (!st) {
      recvs[j]->out_shapes[0] = b->out_shapes[0];
      st = copy_control_inputs(c, b, recvs[j]);
    }
  }
  rf__attrs_clear(&a);
  RF_CHECK(st);
  while (b->num_out_edges > 0) {
    rf__edge *e = b->out_edges[b->num_out_edges - 1];
    rf_node *dst = e->dst;
    int d = dst->assigned_device;
    if (e->src_out == RF_CONTROL_SLOT) {
      RF_CHECK(control(c, send, dst));
      rf__graph_remove_edge(c->g, e);
    } else if (d == S) {
      RF_CHECK(
          rf__graph_update_edge(c->g, dst, e->dst_in, input.node, input.index));
      RF_CHECK(control(c, send, dst));
    } else {
      int j = 0;
      while (others[j] != d) j++;
      RF_CHECK(rf__graph_update_edge(c->g, dst, e->dst_in, recvs[j], 0));
    }
  }
  rf__graph_remove_node(c->g, b);
  return NULL;
}

rf_status *rf__lower_collectives(rf_graph *g, const rf__device_name *devices,
                                 int num_devices) {
  lower_ctx c = {g, devices, num_devices};
  int end = g->num_ids; /* nodes added while lowering need no lowering */
  for (int id = 0; id < end; id++) {
    rf_node *n = g->nodes[id];
    if (!n) continue;
    bool is_reduce = strcmp(n->op->name, "Reduce") == 0;
    bool is_broadcast = strcmp(n->op->name, "Broadcast") == 0;
    if (!is_reduce && !is_broadcast) continue;
    if (n->assigned_device < 0 || n->assigned_device >= num_devices)
      return rf__invalid("node '%s' (%s) has no device", n->name, n->op->name);
    RF_CHECK(is_reduce ? lower_reduce(&c, n) : lower_broadcast(&c, n));
  }
  return NULL;
}
