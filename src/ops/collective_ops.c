/* ops/collective_ops.c - AllReduce, Reduce, Broadcast, AllGather,
 * ReduceScatter and the internal participants the lowering pass makes of
 * Reduce and Broadcast: their signatures, shapes, builders and gradients.
 * Every collective is stateful: two identical collectives are two meetings. */
#include <stdio.h>
#include <string.h>

#include "core/shape.h"
#include "graph/device_name.h"
#include "ops/array_shapes.h"
#include "ops/collective_attrs.h"
#include "ops/collective_names.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/collectives.h"
#include "ringflow/ops.h"

#define REDUCTIONS "reduction: string in {sum, prod, min, max, avg}"
#define COLL_TYPES "T: type in {@numeric}"

/* ---- shapes ---- */

static rf_status *same_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* Reduce: every input has the output's shape. */
static rf_status *reduce_shape(rf__shape_ctx *c) {
  rf_shape s = c->input_shapes[0];
  for (int i = 1; i < c->num_inputs; i++) {
    const rf_shape *o = &c->input_shapes[i];
    if (s.rank < 0) {
      s = *o;
      continue;
    }
    if (o->rank < 0) continue;
    char a[96], b[96];
    if (o->rank != s.rank) goto bad;
    for (int d = 0; d < s.rank; d++) {
      if (s.dims[d] < 0)
        s.dims[d] = o->dims[d];
      else if (o->dims[d] >= 0 && o->dims[d] != s.dims[d])
        goto bad;
    }
    continue;
  bad:
    rf_shape_format(&c->input_shapes[0], a, sizeof a);
    rf_shape_format(o, b, sizeof b);
    return rf__invalid("inputs 0 and %d have different shapes %s and %s", i, a,
                       b);
  }
  c->output_shapes[0] = s;
  return NULL;
}

/* The shape input is a Const whenever the broadcast shape was fully known:
 * int32, or int64 when a dim does not fit in int32. */
static rf_status *broadcast_recv_shape(rf__shape_ctx *c) {
  const rf_tensor *t = c->input_values[0];
  if (!t) return NULL;
  int64_t dims[RF_MAX_RANK];
  int rank;
  RF_CHECK(rf__dims_from_tensor(t, "the shape input", dims, &rank));
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0)
      return rf__invalid("the shape input holds a negative dim %lld",
                         (long long)dims[i]);
  c->output_shapes[0] = rf_shape_make(rank, dims);
  return NULL;
}

static rf_status *broadcast_shape(rf__shape_ctx *c) {
  rf_shape s;
  RF_CHECK(rf__attrs_get_shape(&c->node->attrs, "shape", &s));
  c->output_shapes[0] = s.rank >= 0 ? s : c->input_shapes[0];
  return NULL;
}

static rf_status *gather_shape(rf__shape_ctx *c, bool gather) {
  int64_t n;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "num_devices", &n));
  rf_shape s = c->input_shapes[0];
  if (s.rank == 0)
    return rf__invalid("%s needs an input of rank >= 1, got a scalar",
                       gather ? "AllGather" : "ReduceScatter");
  if (s.rank > 0 && s.dims[0] >= 0) {
    if (!gather && s.dims[0] % n != 0)
      return rf__invalid(
          "ReduceScatter needs a first dimension divisible by "
          "num_devices %lld, got %lld",
          (long long)n, (long long)s.dims[0]);
    if (!gather) {
      s.dims[0] /= n;
    } else if (!rf__dim_mul(s.dims[0], n, &s.dims[0])) {
      char buf[200];
      rf_shape_format(&c->input_shapes[0], buf, sizeof buf);
      return rf__invalid(
          "AllGather of %lld devices: %lld x %lld rows overflows int64 "
          "(input shape %s)",
          (long long)n, (long long)n, (long long)s.dims[0], buf);
    }
  }
  c->output_shapes[0] = s;
  return NULL;
}

static rf_status *all_gather_shape(rf__shape_ctx *c) {
  return gather_shape(c, true);
}
static rf_status *reduce_scatter_shape(rf__shape_ctx *c) {
  return gather_shape(c, false);
}

/* _BucketPack: (total); _BucketUnpack: attr shapes. */
static rf_status *bucket_pack_shape(rf__shape_ctx *c) {
  int64_t total;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "total", &total));
  c->output_shapes[0] = rf_shape_of(1, total);
  return NULL;
}

static rf_status *bucket_unpack_shape(rf__shape_ctx *c) {
  const rf__attr_value *v = rf__attrs_find(&c->node->attrs, "shapes");
  if (!v || v->type != RF_ATTR_SHAPE_LIST || v->n != c->num_outputs)
    return rf__invalid("shapes must list one shape per output");
  for (int i = 0; i < c->num_outputs; i++) c->output_shapes[i] = v->u.shapes[i];
  return NULL;
}

/* ---- builders ---- */

static rf_output invalid_output(void) {
  rf_output o = {NULL, 0};
  return o;
}

static bool require_device(rf_graph *g, const char *op, const char *name,
                           rf_output in) {
  if (in.node->requested_device[0]) return true;
  rf__graph_record(g,
                   rf_status_new(RF_INVALID_ARGUMENT,
                                 "Device assignment required for collective "
                                 "ops: input '%s' of %s '%s' has no device",
                                 in.node->name, op, name ? name : "(unnamed)"));
  return false;
}

/* The n inputs of one collective share a dtype: otherwise records
 * INVALID_ARGUMENT naming input 0 and the first that differs, with their
 * dtypes and devices. */
static bool same_dtype(rf_graph *g, const char *op, const char *name,
                       const rf_output *in, int n) {
  rf_dtype t = rf_output_dtype(in[0]);
  for (int i = 1; i < n; i++) {
    rf_dtype u = rf_output_dtype(in[i]);
    if (u == t) continue;
    rf__graph_record(
        g, rf__invalid("%s '%s': inputs disagree on dtype: input 0 (node "
                       "'%s') is %s on %s but input %d (node '%s') is %s on %s",
                       op, name ? name : "(unnamed)", in[0].node->name,
                       rf_dtype_name(t), in[0].node->requested_device, i,
                       in[i].node->name, rf_dtype_name(u),
                       in[i].node->requested_device));
    return false;
  }
  return true;
}

/* Whether devices a and b may be one device. A name without a task is this
 * process's, which only the job decides: it may be any task's. */
static bool may_be_same_device(const rf__device_name *a,
                               const rf__device_name *b) {
  return a->type == b->type && a->index == b->index &&
         (a->task == b->task || a->task < 0 || b->task < 0);
}

/* The device participant i goes on: the scope's, else its input's. */
static const char *participant_device(rf_graph *g, rf_output in) {
  const char *scope = rf__graph_scope_device(g);
  return scope[0] ? scope : in.node->requested_device;
}

/* What the lowering and the run would refuse, refused here where the graph
 * already shows it: inputs whose shapes are known and differ, and two
 * participants on one device (the same name, task included). Shapes known
 * only at run time are the run's to check (COLLECTIVES.md). Records
 * INVALID_ARGUMENT naming both inputs, their nodes and devices. */
static bool distinct_and_alike(rf_graph *g, const char *op, const char *name,
                               const rf_output *in, int n, bool same_device) {
  for (int i = 1; i < n; i++) {
    rf_shape a = rf_output_shape(in[0]), b = rf_output_shape(in[i]);
    if (rf__shape_compatible(&a, &b)) continue;
    char sa[160], sb[160];
    rf_shape_format(&a, sa, sizeof sa);
    rf_shape_format(&b, sb, sizeof sb);
    rf__graph_record(
        g, rf__invalid("%s '%s': inputs disagree on shape: input 0 (node "
                       "'%s') is %s on %s but input %d (node '%s') is %s on %s",
                       op, name ? name : "(unnamed)", in[0].node->name, sa,
                       in[0].node->requested_device, i, in[i].node->name, sb,
                       in[i].node->requested_device));
    return false;
  }
  if (!same_device) return true;
  for (int i = 1; i < n; i++)
    for (int j = 0; j < i; j++) {
      rf__device_name a, b;
      const char *da = participant_device(g, in[j]);
      const char *db = participant_device(g, in[i]);
      rf_status *ea = rf__device_name_parse(da, &a);
      rf_status *eb = rf__device_name_parse(db, &b);
      bool same = !ea && !eb && a.type == b.type && a.index == b.index &&
                  a.task == b.task;
      rf_status_free(ea);
      rf_status_free(eb);
      if (!same) continue;
      rf__graph_record(
          g, rf__invalid("%s '%s': participants %d (input node '%s') and %d "
                         "(input node '%s') would both be on %s: each "
                         "participant needs a device of its own",
                         op, name ? name : "(unnamed)", j, in[j].node->name, i,
                         in[i].node->name, db));
      return false;
    }
  return true;
}

/* A Reduce on `dev` needs an input there (its receiver's): known at build
 * time, since every input has a device. Otherwise records INVALID_ARGUMENT
 * (the lowering checks it again for a device changed later). */
static bool reduce_has_own_input(rf_graph *g, const char *name, const char *dev,
                                 const rf_output *in, int n) {
  rf__device_name d, e;
  rf_status *bad = rf__device_name_parse(dev, &d);
  if (bad) { /* the builder reports it */
    rf_status_free(bad);
    return true;
  }
  char list[512] = "";
  size_t used = 0;
  for (int i = 0; i < n; i++) {
    const char *x = in[i].node->requested_device;
    rf_status *st = rf__device_name_parse(x, &e);
    if (st) {
      rf_status_free(st);
      return true;
    }
    if (may_be_same_device(&d, &e)) return true;
    bool listed = false; /* few inputs: a scan is fine */
    for (int k = 0; k < i && !listed; k++)
      listed = strcmp(in[k].node->requested_device, x) == 0;
    if (!listed && used < sizeof list)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                               used ? ", " : "", x);
  }
  /* An unnamed Reduce has no node name yet: quote none (a name in quotes
   * is a node's, which callers such as Python's node_name look up). */
  if (name)
    rf__graph_record(g, rf__invalid("No input tensor uses the same device as "
                                    "the Reduce op: node '%s' is on %s, its "
                                    "inputs on %s",
                                    name, dev, list));
  else
    rf__graph_record(g, rf__invalid("No input tensor uses the same device as "
                                    "the Reduce op: the Reduce is on %s, its "
                                    "inputs on %s",
                                    dev, list));
  return false;
}

/* internal: a gradient's participant, whose shared_name may hold the
 * reserved character (ops/collective_names.h). */
static rf_output participant(rf_graph *g, const char *op, const char *name,
                             rf_output input, const char *reduction,
                             int num_devices, const char *shared_name,
                             bool internal) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, &input, 1))
    return invalid_output();
  if (shared_name && !shared_name[0]) {
    rf__graph_refuse(g, op, name,
                     "shared_name is empty (NULL takes the node's name)");
    return invalid_output();
  }
  /* A gradient's participant goes on its forward participant's device (the
   * scope rf_gradients pushed), so its input needs none: a loss built
   * outside any device scope gives gradients without one. */
  const char *scope = rf__graph_scope_device(g);
  if (!(internal && scope[0]) && !require_device(g, op, name, input))
    return invalid_output();
  char fresh[RF_ARG_NAME_MAX + 64]; /* op names are short */
  if (!name) rf__graph_unique_name(g, op, fresh, sizeof fresh);
  const char *nm = name ? name : fresh; /* any length: never cut */
  rf_node_builder *b = rf_node_builder_new(g, op, nm);
  if (internal) rf__node_builder_allow_reserved(b);
  rf_node_builder_input(b, input);
  rf_node_builder_device(b, scope[0] ? scope : input.node->requested_device);
  if (reduction) rf_node_builder_attr_string(b, "reduction", reduction);
  rf_node_builder_attr_int(b, "num_devices", num_devices);
  rf_node_builder_attr_string(b, "shared_name", shared_name ? shared_name : nm);
  return rf__finish_output(g, b);
}

rf_output rf_all_reduce(rf_graph *g, const char *name, rf_output input,
                        rf_reduction reduction, int num_devices,
                        const char *shared_name) {
  return participant(g, "AllReduce", name, input, rf__reduction_name(reduction),
                     num_devices, shared_name, false);
}

rf_output rf_all_gather(rf_graph *g, const char *name, rf_output input,
                        int num_devices, const char *shared_name) {
  return participant(g, "AllGather", name, input, NULL, num_devices,
                     shared_name, false);
}

rf_output rf_reduce_scatter(rf_graph *g, const char *name, rf_output input,
                            rf_reduction reduction, int num_devices,
                            const char *shared_name) {
  return participant(g, "ReduceScatter", name, input,
                     rf__reduction_name(reduction), num_devices, shared_name,
                     false);
}

/* Marks in used[0, len) each k for which op (k = 0) or op_<k> is the
 * shared_name of a node of g: a user's collective may be named like one
 * that fresh_shared_name would make. */
static void mark_shared_names(const rf_graph *g, const char *op, bool *used,
                              size_t len) {
  size_t oplen = strlen(op);
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *n = g->nodes[id];
    const rf__attr_value *v =
        n ? rf__attrs_find(&n->attrs, "shared_name") : NULL;
    if (!v || v->type != RF_ATTR_STRING || strncmp(v->u.s, op, oplen) != 0)
      continue;
    const char *d = v->u.s + oplen;
    if (!*d) {
      used[0] = true;
      continue;
    }
    if (*d++ != '_' || *d < '1' || *d > '9') continue; /* k as printed */
    size_t k = 0;
    for (; *d >= '0' && *d <= '9' && k < len; d++)
      k = k * 10 + (size_t)(*d - '0');
    if (!*d && k < len) used[k] = true;
  }
}

/* n participants named <name>_<i> sharing <name>; all or nothing. */
/* A shared name for n participants built without a name: op, op_1, op_2 ...,
 * the first that no node has, no collective has as its shared_name, and
 * whose participant names (<shared>_<i>) are free too. (A node named op
 * never exists - the participants are op_0 ... - so unique-naming op alone
 * gave every unnamed collective the same name.) Each k refused is some
 * node's name, a participant name or a shared_name, so one of the first
 * 3 * num_ids + 1 is free. False: out of memory. */
static bool fresh_shared_name(rf_graph *g, const char *op, int n, char *buf,
                              size_t len) {
  size_t nk = 3 * (size_t)g->num_ids + 1;
  bool *used = rf__calloc(nk, sizeof *used);
  if (!used) return false;
  mark_shared_names(g, op, used, nk);
  char part[RF_ARG_NAME_MAX + 96];
  for (long long k = 0;; k++) {
    if (k == 0)
      snprintf(buf, len, "%s", op);
    else
      snprintf(buf, len, "%s_%lld", op, k);
    bool free_name =
        !((size_t)k < nk && used[k]) && !rf_graph_find_node(g, buf);
    for (int i = 0; i < n && free_name; i++) {
      snprintf(part, sizeof part, "%s_%d", buf, i);
      free_name = !rf_graph_find_node(g, part);
    }
    if (free_name) break;
  }
  rf__free(used);
  return true;
}

/* A collective's name given by the user: not empty (its participants
 * would be "_0", "_1", ... and its gradient "#grad1") and without the
 * reserved character (named here, before a participant's node name made
 * from it is refused for holding it). */
static bool collective_name_ok(rf_graph *g, const char *op, const char *name) {
  if (!name) return true;
  if (!name[0])
    rf__graph_record(g, rf__invalid("%s: a collective's name must not be "
                                    "empty (NULL generates one)",
                                    op));
  else if (strchr(name, RF_RESERVED_NAME_CHAR))
    rf__graph_record(g, rf__invalid("%s '%s': the name is not valid: it "
                                    "holds '%c', which is reserved for the "
                                    "collectives rf_gradients makes",
                                    op, name, RF_RESERVED_NAME_CHAR));
  else
    return true;
  return false;
}

/* The node whose collective is already called `name`: one with that
 * shared_name, or a Reduce or Broadcast of that name (lowering gives its
 * pieces its name as their shared_name); NULL if none. Two collectives
 * built apart under one name would otherwise pass every build-time check
 * and fail each run as one group that disagrees. */
static const rf_node *collective_named(const rf_graph *g, const char *name) {
  for (int id = 0; id < g->num_ids; id++) {
    const rf_node *n = g->nodes[id];
    if (!n) continue;
    const rf__attr_value *v = rf__attrs_find(&n->attrs, "shared_name");
    if (v && v->type == RF_ATTR_STRING && strcmp(v->u.s, name) == 0) return n;
    if ((strcmp(n->op->name, "Reduce") == 0 ||
         strcmp(n->op->name, "Broadcast") == 0) &&
        strcmp(n->name, name) == 0)
      return n;
  }
  return NULL;
}

/* ALREADY_EXISTS when `name` is taken by another collective (above). */
static bool collective_name_free(rf_graph *g, const char *what, const char *op,
                                 const char *name) {
  const rf_node *t = name ? collective_named(g, name) : NULL;
  if (!t) return true;
  rf__graph_record(g, rf__error(RF_ALREADY_EXISTS,
                                "%s '%s' (%s): the name is already another "
                                "collective's: node '%s' (%s)",
                                what, name, op, t->name, t->op->name));
  return false;
}

static void participants_n(rf_graph *g, const char *op, const char *name,
                           const rf_output *inputs, int n,
                           const char *reduction, rf_output *outputs) {
  if (rf__graph_failed(g) || !collective_name_ok(g, op, name) ||
      !collective_name_free(g, "collective", op, name))
    return;
  if (!inputs || !outputs || n < 1) {
    rf__graph_refuse(g, op, name, "need n >= 1 inputs and an outputs array");
    return;
  }
  if (!rf__graph_inputs_ok(g, op, name, inputs, n)) return;
  char fresh[RF_ARG_NAME_MAX + 64];
  if (!name && !fresh_shared_name(g, op, n, fresh, sizeof fresh)) {
    rf__graph_record(g, rf__oom());
    return;
  }
  const char *shared = name ? name : fresh;
  for (int i = 0; i < n; i++)
    if (!require_device(g, op, shared, inputs[i])) return;
  if (!same_dtype(g, op, shared, inputs, n) ||
      !distinct_and_alike(g, op, shared, inputs, n, true))
    return;
  size_t len = strlen(shared) + 16;
  char *nm = rf__malloc(len);
  if (!nm) {
    rf__graph_record(g, rf__oom());
    return;
  }
  int first_new = g->num_ids;
  rf_output tmp[64];
  rf_output *outs = n <= 64 ? tmp : outputs;
  for (int i = 0; i < n; i++) {
    snprintf(nm, len, "%s_%d", shared, i);
    outs[i] = participant(g, op, nm, inputs[i], reduction, n, shared, false);
    if (!outs[i].node) break;
  }
  rf__free(nm);
  if (rf__graph_failed(g)) { /* nothing half-built stays behind */
    for (int id = g->num_ids - 1; id >= first_new; id--)
      if (g->nodes[id]) rf__graph_remove_node(g, g->nodes[id]);
    return;
  }
  if (outs != outputs) memcpy(outputs, outs, sizeof *outputs * (size_t)n);
}

void rf_all_reduce_n(rf_graph *g, const char *name, const rf_output *inputs,
                     int n, rf_reduction reduction, rf_output *outputs) {
  participants_n(g, "AllReduce", name, inputs, n, rf__reduction_name(reduction),
                 outputs);
}

void rf_all_gather_n(rf_graph *g, const char *name, const rf_output *inputs,
                     int n, rf_output *outputs) {
  participants_n(g, "AllGather", name, inputs, n, NULL, outputs);
}

void rf_reduce_scatter_n(rf_graph *g, const char *name, const rf_output *inputs,
                         int n, rf_reduction reduction, rf_output *outputs) {
  participants_n(g, "ReduceScatter", name, inputs, n,
                 rf__reduction_name(reduction), outputs);
}

/* The builder of a Reduce or Broadcast node, whose name lowering makes its
 * pieces' shared name: `name` if no other collective has it (else
 * ALREADY_EXISTS, recorded), or the first generated one that neither a node
 * nor a collective has. NULL when refused. */
static rf_node_builder *one_node_builder(rf_graph *g, const char *op,
                                         const char *name) {
  if (!collective_name_free(g, "node", op, name)) return NULL;
  char fresh[64];
  if (!name && !fresh_shared_name(g, op, 0, fresh, sizeof fresh)) {
    rf__graph_record(g, rf__oom());
    return NULL;
  }
  return rf_node_builder_new(g, op, name ? name : fresh);
}

rf_output rf_reduce(rf_graph *g, const char *name, const rf_output *inputs,
                    int n, rf_reduction reduction) {
  if (rf__graph_failed(g)) return invalid_output();
  if (!inputs || n < 1) {
    rf__graph_refuse(g, "Reduce", name, "need n >= 1 inputs");
    return invalid_output();
  }
  if (!rf__graph_inputs_ok(g, "Reduce", name, inputs, n))
    return invalid_output();
  for (int i = 0; i < n; i++)
    if (!require_device(g, "Reduce", name, inputs[i])) return invalid_output();
  const char *scope = rf__graph_scope_device(g);
  const char *dev = scope[0] ? scope : inputs[0].node->requested_device;
  if (!same_dtype(g, "Reduce", name, inputs, n) ||
      !distinct_and_alike(g, "Reduce", name, inputs, n, false) ||
      !reduce_has_own_input(g, name, dev, inputs, n))
    return invalid_output();
  rf_node_builder *b = one_node_builder(g, "Reduce", name);
  if (!b) return invalid_output();
  rf_node_builder_input_list(b, inputs, n);
  rf_node_builder_device(b, dev);
  rf_node_builder_attr_string(b, "reduction", rf__reduction_name(reduction));
  return rf__finish_output(g, b);
}

rf_output rf_broadcast(rf_graph *g, const char *name, rf_output input) {
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "Broadcast", name, &input, 1))
    return invalid_output();
  if (!require_device(g, "Broadcast", name, input)) return invalid_output();
  rf_node_builder *b = one_node_builder(g, "Broadcast", name);
  if (!b) return invalid_output();
  rf_node_builder_input(b, input);
  const char *scope = rf__graph_scope_device(g);
  rf_node_builder_device(b, scope[0] ? scope : input.node->requested_device);
  rf_node_builder_attr_shape(b, "shape", rf_output_shape(input));
  return rf__finish_output(g, b);
}

/* ---- gradients ---- */

static bool has_device(rf_output o) {
  return o.node->requested_device && o.node->requested_device[0];
}

/* The participant of construction c's gradient collective for c->op (and,
 * with what, of one of its helpers): named by ops/collective_names.h. */
static rf_output grad_participant(rf__grad_ctx *c, const char *op, rf_output x,
                                  const char *reduction, const char *what) {
  const char *shared;
  int64_t n;
  rf_status *st = rf__attrs_get_string(&c->op->attrs, "shared_name", &shared);
  if (!st) st = rf__attrs_get_int(&c->op->attrs, "num_devices", &n);
  char *name = st ? NULL : rf__grad_shared_name(shared, c->construction, what);
  if (!st && !name) st = rf__oom();
  if (st) {
    rf__graph_record(c->g, st);
    return invalid_output();
  }
  rf_output y = participant(c->g, op, NULL, x, reduction, (int)n, name, true);
  rf__free(name);
  return y;
}

static rf_output grad_all_reduce(rf__grad_ctx *c, rf_output x, rf_reduction r,
                                 const char *what) {
  return grad_participant(c, "AllReduce", x, rf__reduction_name(r), what);
}

/* This participant's place in device order (task, then index; the
 * participants share one device type), the order of an all-gather's rows
 * and of a tie's winner. False (recorded) if its device does not parse. */
static bool device_order(rf__grad_ctx *c, int *order) {
  rf__device_name dev;
  rf_status *st = rf__device_name_parse(c->op->requested_device, &dev);
  if (st) {
    rf__graph_record(c->g, st);
    return false;
  }
  *order = (dev.task > 0 ? dev.task : 0) * 1024 + dev.index;
  return true;
}

/* max/min: the summed gradient goes to the participant holding the extremum;
 * on ties to the one first in device order (task, then index). The winner is
 * found with one more all-reduce(min) over "my place in that order where I
 * hold the extremum".
 * (PyTorch and Horovod re-apply the forward op here, which is wrong.) */
static rf_output extremum_mask(rf__grad_ctx *c, rf_reduction r) {
  rf_graph *g = c->g;
  rf_output x = rf__input(c->op, 0), y = {c->op, 0};
  /* A float32 forward may have gone over the wire in bfloat16 or float16
   * (its comm_dtype, or the session's; either can be set after this), so
   * its output need equal no input: the extremum is found again in full
   * precision (float32 on the wire whatever the session says). Other
   * dtypes are never narrowed: the output is an input's value. */
  if (rf_output_dtype(x) == RF_FLOAT32) {
    y = grad_all_reduce(c, x, r, "extremum");
    if (y.node) {
      rf_status *st = rf_all_reduce_set_comm_dtype(y.node, RF_FLOAT32);
      if (st) {
        rf__graph_record(g, st);
        return invalid_output();
      }
    }
  }
  int order;
  if (!device_order(c, &order)) return invalid_output();
  const double big = 2147483647.0;
  rf_output key = rf_const_scalar(g, NULL, RF_INT32, order);
  rf_output holds = rf_cast(g, NULL, rf_equal(g, NULL, x, y), RF_INT32);
  /* holds ? key : big, in int32 arithmetic */
  rf_output bid = rf_add(
      g, NULL,
      rf_mul(g, NULL, holds, rf_const_scalar(g, NULL, RF_INT32, order - big)),
      rf_const_scalar(g, NULL, RF_INT32, big));
  rf_output winner = grad_all_reduce(c, bid, RF_REDUCE_MIN, "winner");
  return rf_cast(g, NULL, rf_equal(g, NULL, winner, key), rf_output_dtype(x));
}

/* prod: d/dx_i = (sum of dy) * prod_{k != i} x_k, the product of the
 * others' inputs, computed from them: every participant all-gathers the
 * inputs and its place in device order, and multiplies the rows, its own
 * replaced by 1 (row (1 - mine) + mine). Dividing the output by x_i is
 * wrong where x_i is 0 and where the output overflowed; and branches for
 * zeros (one zero: the product of the non-zeros; two: 0) were constants to
 * a second derivative, which was wrong at every zero. Products and sums of
 * the inputs differentiate again exactly; the cost is n rows a
 * participant, for a reduction that is rarely large. */
static rf_output prod_others(rf__grad_ctx *c) {
  rf_graph *g = c->g;
  rf_output x = rf__input(c->op, 0);
  int order;
  if (!device_order(c, &order)) return invalid_output();
  rf_output key = rf_const_scalar(g, NULL, RF_INT32, order);
  int64_t n = 0;
  rf_status *st = rf__attrs_get_int(&c->op->attrs, "num_devices", &n);
  rf_output *rows = st ? NULL : rf__calloc(2 * (size_t)n, sizeof *rows);
  if (!rows) {
    rf__graph_record(g, st ? st : rf__oom());
    return invalid_output();
  }
  rf_output *places = rows + n;
  rf_dtype t = rf_output_dtype(x);
  rf_output all = grad_participant(
      c, "AllGather", rf_expand_dims(g, NULL, x, 0), NULL, "inputs");
  rf_output where = grad_participant(
      c, "AllGather", rf_expand_dims(g, NULL, key, 0), NULL, "places");
  rf_split(g, NULL, all, (int)n, 0, rows);
  rf_split(g, NULL, where, (int)n, 0, places);
  rf_output one = rf_const_scalar(g, NULL, t, 1.0), acc = {NULL, 0};
  const int64_t first = 0;
  for (int64_t j = 0; j < n && !rf__graph_failed(g); j++) {
    rf_output row = rf_squeeze(g, NULL, rows[j], &first, 1);
    rf_output mine = rf_cast(
        g, NULL,
        rf_equal(g, NULL, rf_squeeze(g, NULL, places[j], &first, 1), key), t);
    rf_output term =
        rf_add(g, NULL, rf_mul(g, NULL, row, rf_sub(g, NULL, one, mine)), mine);
    acc = j == 0 ? term : rf_mul(g, NULL, acc, term);
  }
  rf__free(rows);
  return rf__graph_failed(g) ? invalid_output() : acc;
}

static rf_status *all_reduce_grad(rf__grad_ctx *c) {
  const char *red;
  RF_CHECK(rf__attrs_get_string(&c->op->attrs, "reduction", &red));
  /* An integer participant reached only through integer casts (the
   * #winner helper of a max/min gradient, differentiated again) gets no
   * gradient: nothing flows through an integer (rf__cast_grad). */
  if (!rf_dtype_is_float(rf_output_dtype(c->dy[0])) && c->dy_is_filler)
    return NULL;
  if (!rf_dtype_is_float(rf_output_dtype(c->dy[0])))
    return rf__invalid("No gradient defined for AllReduce of %s: node '%s'",
                       rf_dtype_name(rf_output_dtype(c->dy[0])), c->op->name);
  bool extremum = strcmp(red, "max") == 0 || strcmp(red, "min") == 0;
  if (strcmp(red, "avg") != 0 && strcmp(red, "sum") != 0 && !extremum &&
      strcmp(red, "prod") != 0)
    return rf__invalid(
        "No gradient defined for AllReduce with reduction '%s' "
        "(node '%s')",
        red, c->op->name);
  if (strcmp(red, "avg") == 0) {
    c->dx[0] = grad_all_reduce(c, c->dy[0], RF_REDUCE_AVG, NULL);
    return NULL;
  }
  rf_output sum = grad_all_reduce(c, c->dy[0], RF_REDUCE_SUM, NULL);
  if (strcmp(red, "sum") == 0)
    c->dx[0] = sum;
  else if (extremum)
    c->dx[0] =
        rf_mul(c->g, NULL, sum,
               extremum_mask(
                   c, strcmp(red, "max") == 0 ? RF_REDUCE_MAX : RF_REDUCE_MIN));
  else
    c->dx[0] = rf_mul(c->g, NULL, sum, prod_others(c));
  return NULL;
}

static rf_status *all_gather_grad(rf__grad_ctx *c) {
  c->dx[0] = grad_participant(c, "ReduceScatter", c->dy[0],
                              rf__reduction_name(RF_REDUCE_SUM), NULL);
  return NULL;
}

static rf_status *reduce_scatter_grad(rf__grad_ctx *c) {
  const char *red;
  RF_CHECK(rf__attrs_get_string(&c->op->attrs, "reduction", &red));
  if (strcmp(red, "sum") != 0)
    return rf__invalid(
        "No gradient defined for ReduceScatter except sum: node "
        "'%s' uses %s",
        c->op->name, red);
  c->dx[0] = grad_participant(c, "AllGather", c->dy[0], NULL, NULL);
  return NULL;
}

/* Reduce(sum): every input's gradient is the incoming gradient, broadcast
 * from the Reduce's device to wherever the input lives; Reduce(avg): the
 * incoming gradient divided by the number of inputs, then broadcast. */
static rf_status *reduce_grad(rf__grad_ctx *c) {
  const char *red;
  RF_CHECK(rf__attrs_get_string(&c->op->attrs, "reduction", &red));
  bool avg = strcmp(red, "avg") == 0;
  if (strcmp(red, "sum") != 0 && !avg)
    return rf__invalid(
        "No gradient defined for Reduce except sum and avg: node '%s' "
        "uses %s",
        c->op->name, red);
  rf_dtype t = rf_output_dtype(c->dy[0]);
  if (avg && !rf_dtype_is_float(t))
    return rf__invalid("No gradient defined for Reduce(avg) of %s: node '%s'",
                       rf_dtype_name(t), c->op->name);
  /* A gradient without a device (from a consumer with none) is on the
   * Reduce's device, the scope: an Identity there gives it one. */
  rf_output dy =
      has_device(c->dy[0]) ? c->dy[0] : rf_identity(c->g, NULL, c->dy[0]);
  if (avg) /* on the Reduce's device, before the broadcast */
    dy = rf_div(c->g, NULL, dy,
                rf_const_scalar(c->g, NULL, t, (double)c->op->num_inputs));
  rf_output b = rf_broadcast(c->g, NULL, dy);
  for (int i = 0; i < c->op->num_inputs; i++) c->dx[i] = b;
  return NULL;
}

/* Where a consumer's gradient contribution lives: its device, or, with
 * none (a consumer without a device runs on its placed input's device), the
 * broadcast's own. */
static const char *part_device(const rf__grad_ctx *c, rf_output part) {
  return has_device(part) ? part.node->requested_device
                          : c->op->requested_device;
}

/* Broadcast: the gradient is the sum of every consumer's gradient, i.e. a
 * Reduce(sum) on the broadcast's device over the contributions, which are
 * first summed per device so each device takes part once. Any number of
 * contributions (a consumer reading the broadcast twice gives two). */
static rf_status *broadcast_grad(rf__grad_ctx *c) {
  int n = c->num_dy_parts[0];
  const rf_output *parts = c->dy_parts[0];
  rf_output per_device[64];
  int ndev = 0;
  bool *used = rf__calloc((size_t)n + 1, sizeof *used);
  rf_output *group = rf__malloc(sizeof *group * ((size_t)n + 1));
  rf_status *st = used && group ? NULL : rf__oom();
  bool own_device = false;
  for (int i = 0; i < n && !st; i++) {
    if (used[i]) continue;
    if (ndev == 64) {
      st = rf__invalid("Broadcast '%s': consumers on more than 64 devices",
                       c->op->name);
      break;
    }
    const char *dev = part_device(c, parts[i]);
    int k = 0;
    for (int j = i; j < n; j++)
      if (!used[j] && strcmp(part_device(c, parts[j]), dev) == 0) {
        used[j] = true;
        group[k++] = parts[j];
      }
    st = rf_graph_push_device(c->g, dev);
    if (st) break;
    /* one contribution with a device is used as it is; else a node on dev
     * (Reduce needs each input on a device) */
    per_device[ndev++] = k == 1 && has_device(group[0]) ? group[0]
                         : k == 1 ? rf_identity(c->g, NULL, group[0])
                                  : rf_add_n(c->g, NULL, group, k);
    rf_graph_pop_device(c->g);
    if (strcmp(dev, c->op->requested_device) == 0) own_device = true;
  }
  rf__free(used);
  rf__free(group);
  RF_CHECK(st);
  if (!own_device) { /* Reduce needs a participant on its own device */
    if (ndev == 64)
      return rf__invalid("Broadcast '%s': too many devices", c->op->name);
    per_device[ndev++] = rf_zeros_like(c->g, NULL, rf__input(c->op, 0));
  }
  c->dx[0] = rf_reduce(c->g, NULL, per_device, ndev, RF_REDUCE_SUM);
  return NULL;
}

/* ---- registration ---- */

static const rf__op_spec specs[] = {
    {.name = "AllReduce",
     .inputs = "input: T",
     .outputs = "data: T",
     /* comm_dtype: the wire dtype of a float32 all-reduce (COLLECTIVES.md,
      * "Reduced-precision communication"); auto: the session's. */
     .attrs = REDUCTIONS
     "; " COLL_TYPES
     "; num_devices: int >= 1; shared_name: string; comm_dtype: string in "
     "{auto, float32, bfloat16, float16} = auto",
     .shape = same_shape,
     .grad = all_reduce_grad,
     .flags = RF_OP_STATEFUL | RF_OP_GROUPED},
    {.name = "AllGather",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = COLL_TYPES "; num_devices: int >= 1; shared_name: string",
     .shape = all_gather_shape,
     .grad = all_gather_grad,
     .flags = RF_OP_STATEFUL | RF_OP_GROUPED},
    {.name = "ReduceScatter",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = REDUCTIONS "; " COLL_TYPES
                         "; num_devices: int >= 1; shared_name: string",
     .shape = reduce_scatter_shape,
     .grad = reduce_scatter_grad,
     .flags = RF_OP_STATEFUL | RF_OP_GROUPED},
    {.name = "Reduce",
     .inputs = "input: num_devices * T",
     .outputs = "data: T",
     .attrs = REDUCTIONS "; " COLL_TYPES "; num_devices: int >= 1",
     .shape = reduce_shape,
     .grad = reduce_grad,
     .flags = RF_OP_STATEFUL},
    {.name = "Broadcast",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = COLL_TYPES "; shape: shape",
     .shape = broadcast_shape,
     .grad = broadcast_grad,
     .flags = RF_OP_STATEFUL | RF_OP_GRAD_UNSUMMED},
    {.name = "_ReduceSend",
     .inputs = "input: T",
     .attrs = REDUCTIONS "; " COLL_TYPES
                         "; num_devices: int >= 1; shared_name: string",
     .flags = RF_OP_STATEFUL},
    {.name = "_ReduceRecv",
     .inputs = "input: T",
     .outputs = "data: T",
     .attrs = REDUCTIONS "; " COLL_TYPES
                         "; num_devices: int >= 1; shared_name: string",
     .shape = same_shape,
     .flags = RF_OP_STATEFUL},
    {.name = "_BroadcastSend",
     .inputs = "input: T",
     .attrs = COLL_TYPES "; num_devices: int >= 1; shared_name: string",
     .flags = RF_OP_STATEFUL},
    {.name = "_BroadcastRecv",
     .inputs = "shape: Tshape",
     .outputs = "output: T",
     .attrs = COLL_TYPES
     "; Tshape: type in {int32, int64} = int32; num_devices: int >= 1; "
     "shared_name: string",
     .shape = broadcast_recv_shape,
     .flags = RF_OP_STATEFUL},
    /* A bucket of fused all-reduces (passes/bucket_collectives.c): Pack
     * copies its N inputs into one flat tensor, each at the element offset
     * `offsets` gives (64-byte aligned; the gaps are zeros), Unpack hands out
     * zero-copy views of the reduced tensor at the same offsets. limit: the
     * bucket size the pass filled it to (0: not recorded). */
    {.name = "_BucketPack",
     .inputs = "inputs: N * T",
     .outputs = "packed: T",
     .attrs = COLL_TYPES "; N: int >= 1; offsets: list(int); total: int >= 0; "
                         "limit: int >= 0 = 0",
     .shape = bucket_pack_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "_BucketUnpack",
     .inputs = "packed: T",
     .outputs = "outputs: N * T",
     .attrs = COLL_TYPES "; N: int >= 1; offsets: list(int); shapes: "
                         "list(shape)",
     .shape = bucket_unpack_shape,
     .flags = RF_OP_NO_GRADIENT},
};

rf_status *rf__register_collective_ops(void) {
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
    RF_CHECK(rf__op_register(&specs[i]));
  return NULL;
}
