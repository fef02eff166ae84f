/* passes/bucket_collectives.c - the POST_PLACEMENT pass, run before
 * lowering, that fuses independent all-reduces into buckets and casts
 * float32 all-reduces to a narrower wire dtype (docs/COLLECTIVES.md,
 * "Buckets"). Compile sees the whole step graph, gradients included, so the
 * grouping is decided once:
 *
 *   x_1..x_k on d -> _BucketPack -> [Cast] -> AllReduce -> [Cast]
 *                 -> _BucketUnpack -> y_1..y_k on d          (every device d)
 *
 * All-reduces fuse when they agree on T, reduction, wire dtype and the
 * ordered device set, have identical fully known shapes on every device, and
 * no path joins them: the groups of every collective (participants of one
 * shared_name) are contracted into one vertex, a bucket grows only by a
 * group it neither reaches nor is reached from in that graph - buckets made
 * earlier included - so fusing never makes a cycle, and no device waits for
 * a meeting that waits for it. Groups are taken in the order their inputs
 * become ready (topological order), so the first bucket of a backward pass
 * holds the last layer's gradients and meets while earlier layers still
 * compute. Slices start on 64-byte boundaries, so _BucketUnpack's outputs
 * are views of the reduced tensor (no copy out), and the producers of the
 * pack's inputs write straight into their slices (runtime/executor_homes.c);
 * the pack copies only inputs that were forwarded rather than produced,
 * and on CPU devices, where such a copy costs more than the collective it
 * saves, those fuse only when small (CPU_COPY_IN_MAX_BYTES). The bucket
 * size is the session's, or by the devices' kind (RF_BUCKET_BYTES_AUTO).
 *
 * In a job every process compiles the whole job's graph but prunes it for
 * its own feeds and fetches, so readiness order and paths may differ
 * between processes. The buckets are therefore decided once per compile
 * before pruning, on the whole job's placed graph, which is the same in
 * every process (rf__bucket_collectives_plan records them on the
 * participants), and the pass after pruning fuses what was recorded: the
 * present members of each bucket, in the recorded order. Every process
 * whose task takes part in a collective keeps it (else unfused it would
 * hang too), so they all fuse alike. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "kernels/kernel.h"
#include "ops/collective_attrs.h"
#include "ops/op_registry.h"
#include "passes/bucket_collectives.h"
#include "ringflow/session.h"

#define MAX_RANKS 64
#define MAX_PER_BUCKET 64
/* On CPU devices an input the pack must copy in (forwarded, not computed
 * into its slice) fuses only up to this many bytes: shared memory has no
 * wire, so the copy costs about as much memory traffic as the reduction
 * itself, and from a few KiB up more than the ~1 us a collective that
 * fusing saves (docs/PERFORMANCE.md, "Session 10: buckets on CPU"). */
#define CPU_COPY_IN_MAX_BYTES 4096

/* One all-reduce: its participants by rank (device order). */
typedef struct group {
  const char *shared_name;
  rf_node *members[MAX_RANKS];
  int n;
  rf_dtype type, wire;
  char reduction[8]; /* copies: rewriting removes the participants */
  rf_shape shape;
  int64_t count; /* elements per participant; -1: known at run time */
  int ready;     /* topological position of its last participant */
  bool castable; /* well formed, and its participants agree on the wire */
  bool fusable;  /* castable, with one fully known shape */
  bool alone;    /* fusable, but a copy in would cost more than fusing saves */
} group;

typedef struct bucket_ctx {
  rf__pass_ctx *pc;
  rf_graph *g;
  group *groups;
  int num_groups;
  int *uf;   /* union-find over node ids: contracted collectives */
  int *ring; /* circular list of each class's node ids */
  int *seen; /* visit stamps for reachability */
  int *stack;
  int stamp;
} bucket_ctx;

static int find(int *uf, int x) {
  while (uf[x] != x) x = uf[x] = uf[uf[x]];
  return x;
}

static void unite(bucket_ctx *c, int a, int b) {
  a = find(c->uf, a), b = find(c->uf, b);
  if (a == b) return;
  c->uf[b] = a;
  int t = c->ring[a]; /* splice the two circular lists */
  c->ring[a] = c->ring[b];
  c->ring[b] = t;
}

/* Whether some node of class `from` reaches a node of class `to` through
 * data and control edges (forward) or is reached from one (backward), in the
 * graph where each class is one vertex. */
static bool reaches(bucket_ctx *c, int from, int to, bool forward) {
  int top = 0;
  c->stamp++;
  for (int x = from;;) { /* every member of `from` */
    c->seen[x] = c->stamp;
    c->stack[top++] = x;
    x = c->ring[x];
    if (x == from) break;
  }
  while (top > 0) {
    rf_node *v = c->g->nodes[c->stack[--top]];
    int ne = forward ? v->num_out_edges : v->num_in_edges;
    for (int k = 0; k < ne; k++) {
      rf_node *w = forward ? v->out_edges[k]->dst : v->in_edges[k]->src;
      if (c->seen[w->id] == c->stamp) continue;
      int cw = find(c->uf, w->id);
      if (cw == to) return true;
      for (int y = w->id;;) { /* a collective: all its participants */
        if (c->seen[y] != c->stamp) {
          c->seen[y] = c->stamp;
          c->stack[top++] = y;
        }
        y = c->ring[y];
        if (y == w->id) break;
      }
    }
  }
  return false;
}

static bool independent(bucket_ctx *c, int a, int b) {
  a = find(c->uf, a), b = find(c->uf, b);
  return a != b && !reaches(c, a, b, true) && !reaches(c, a, b, false);
}

static int by_ready(const void *a, const void *b) {
  const group *x = *(group *const *)a, *y = *(group *const *)b;
  return (x->ready > y->ready) - (x->ready < y->ready);
}

/* The wire dtype of an all-reduce of `type` whose comm_dtype attr is
 * `attr`: the session's for "auto"; only float32 narrows. */
static rf_status *wire_dtype(const bucket_ctx *c, const rf_node *n,
                             rf_dtype type, rf_dtype *out) {
  const char *attr = "auto";
  if (rf__attrs_find(&n->attrs, "comm_dtype"))
    RF_CHECK(rf__attrs_get_string(&n->attrs, "comm_dtype", &attr));
  rf_dtype session = c->pc->narrow_comm ? c->pc->comm_dtype : RF_FLOAT32;
  rf_dtype w = strcmp(attr, "auto") == 0 ? session : rf_dtype_from_name(attr);
  if (strcmp(attr, "auto") != 0 && w != RF_FLOAT32 && type != RF_FLOAT32)
    return rf__invalid(
        "node '%s' (AllReduce) on %s: comm_dtype %s applies to float32 "
        "all-reduces only, this one is %s",
        n->name, n->requested_device, attr, rf_dtype_name(type));
  *out = type == RF_FLOAT32 ? w : type;
  return NULL;
}

/* The participant of g on device d, or NULL. */
static group *find_group(bucket_ctx *c, const char *name) {
  for (int i = 0; i < c->num_groups; i++)
    if (strcmp(c->groups[i].shared_name, name) == 0) return &c->groups[i];
  return NULL;
}

/* An attr's value when it has the type asked for, else NULL. */
static const rf__attr_value *attr(const rf_node *n, const char *name,
                                  rf__attr_type type) {
  const rf__attr_value *v = rf__attrs_find(&n->attrs, name);
  return v && v->type == type ? v : NULL;
}

/* Whether group x can be rewritten at all: complete, consistent, distinct
 * devices of one type (of any task), at most MAX_RANKS. Anything else is
 * left alone, for the group checks after lowering to report. Such a group
 * may be cast to its wire dtype whatever its shape; to fuse it also needs
 * one_shape. */
static bool well_formed(const bucket_ctx *c, const group *x) {
  const rf_node *m0 = x->members[0];
  const rf__attr_value *nd = attr(m0, "num_devices", RF_ATTR_INT);
  const rf__attr_value *red0 = attr(m0, "reduction", RF_ATTR_STRING);
  if (!nd || nd->u.i != x->n || !red0 || x->n > MAX_RANKS) return false;
  for (int r = 0; r < x->n; r++) {
    const rf_node *m = x->members[r];
    const rf__attr_value *red = attr(m, "reduction", RF_ATTR_STRING);
    int d = m->assigned_device;
    if (d < 0 || d >= c->pc->num_devices ||
        (r > 0 && x->members[r - 1]->assigned_device >= d) || !red ||
        strcmp(red->u.s, red0->u.s) != 0 ||
        m->out_dtypes[0] != m0->out_dtypes[0] ||
        c->pc->devices[d].name.type !=
            c->pc->devices[m0->assigned_device].name.type)
      return false;
  }
  return true;
}

/* Whether well-formed group x may fuse: one fully known shape on every
 * participant. */
static bool one_shape(const group *x) {
  const rf_node *m0 = x->members[0];
  if (!rf_shape_is_fully_defined(&m0->out_shapes[0])) return false;
  /* A tensor whose bytes (rounded up to a slice) do not fit int64 never
   * fuses: it could not be allocated either, which its kernel reports. */
  int64_t count = rf_shape_num_elements(&m0->out_shapes[0]);
  int64_t size = (int64_t)rf_dtype_size(m0->out_dtypes[0]);
  if (count < 0 || size <= 0 ||
      count > (INT64_MAX - RF_TENSOR_ALIGNMENT) / size)
    return false;
  for (int r = 1; r < x->n; r++)
    if (!rf_shape_equal(&x->members[r]->out_shapes[0], &m0->out_shapes[0]))
      return false;
  return true;
}

/* The producer of participant m's input when the pack would have to copy
 * it in on a CPU device, else NULL: a producer on another device (its
 * tensor arrives forwarded by a _Recv) or a kernel of constant work
 * (RF_COST_CHEAP: Placeholder, Const, Identity, a variable read, a
 * collective), which hands a tensor on rather than writing one
 * (runtime/executor_homes.c gives slices to allocating producers only). */
static const rf_node *copied_in(const rf_node *m) {
  const rf_node *src = m->data_in[0]->src;
  if (src->assigned_device != m->assigned_device) return src;
  const rf__kernel_def *k = rf__kernel_find(src->op->name, RF_DEVICE_CPU);
  return !k || k->cost == RF_COST_CHEAP ? src : NULL;
}

/* For fusable group x on CPU devices with more than CPU_COPY_IN_MAX_BYTES
 * a participant: the first rank whose input the pack would copy in, else
 * -1 (the group fuses). */
static int copied_rank(const bucket_ctx *c, const group *x) {
  int64_t bytes = x->count * (int64_t)rf_dtype_size(x->type);
  if (bytes <= CPU_COPY_IN_MAX_BYTES ||
      c->pc->devices[x->members[0]->assigned_device].name.type != RF_DEVICE_CPU)
    return -1;
  for (int r = 0; r < x->n; r++)
    if (copied_in(x->members[r])) return r;
  return -1;
}

/* Says why group x stays alone, so that RF_LOG=info explains a gradient
 * that did not fuse. */
static void log_alone(const bucket_ctx *c, const group *x) {
  if (!rf__log_on(RF_LOG_INFO)) return;
  const rf_node *m = x->members[copied_rank(c, x)], *src = copied_in(m);
  int sd = src->assigned_device;
  rf__log_write(
      RF_LOG_INFO,
      "compile %ld: all-reduce '%.200s' not fused: its input on %s "
      "is forwarded (%s '%.200s' on %s), and copying its %lld "
      "bytes into a bucket costs more than a collective on CPU "
      "devices",
      c->pc->compile, x->shared_name,
      c->pc->devices[m->assigned_device].canonical, src->op->name, src->name,
      sd >= 0 && sd < c->pc->num_devices ? c->pc->devices[sd].canonical : "?",
      (long long)(x->count * (int64_t)rf_dtype_size(x->type)));
}

static int by_device(const void *a, const void *b) {
  const rf_node *x = *(rf_node *const *)a, *y = *(rf_node *const *)b;
  return (x->assigned_device > y->assigned_device) -
         (x->assigned_device < y->assigned_device);
}

/* Collects every AllReduce group and contracts every collective group
 * (AllReduce, AllGather, ReduceScatter: RF_OP_GROUPED) in the union-find. */
static rf_status *collect(bucket_ctx *c, rf_node **order, int norder) {
  rf_graph *g = c->g;
  for (int i = 0; i < g->num_ids; i++) c->uf[i] = c->ring[i] = i;
  /* Groups of other collectives, contracted by name: a scan per node over
   * the groups seen so far (a compile has few). */
  rf_node **firsts = rf__malloc(sizeof *firsts * (size_t)(g->num_ids + 1));
  RF_CHECK_ALLOC(firsts);
  int nfirsts = 0;
  for (int p = 0; p < norder; p++) {
    rf_node *n = order[p];
    const rf__attr_value *sn = attr(n, "shared_name", RF_ATTR_STRING);
    if (!(n->op->flags & RF_OP_GROUPED) || !sn) continue;
    int j = 0;
    while (j < nfirsts &&
           (strcmp(attr(firsts[j], "shared_name", RF_ATTR_STRING)->u.s,
                   sn->u.s) != 0 ||
            firsts[j]->op != n->op))
      j++;
    if (j == nfirsts) firsts[nfirsts++] = n;
    unite(c, firsts[j]->id, n->id);
    if (strcmp(n->op->name, "AllReduce") != 0) continue;
    group *x = find_group(c, sn->u.s);
    if (!x) {
      x = &c->groups[c->num_groups++];
      *x = (group){.shared_name = sn->u.s};
    }
    if (x->n < MAX_RANKS) x->members[x->n] = n;
    x->n++; /* one too many marks the group malformed */
    x->ready = p;
  }
  rf__free(firsts);
  for (int i = 0; i < c->num_groups; i++) {
    group *x = &c->groups[i];
    if (x->n > MAX_RANKS) continue;
    qsort(x->members, (size_t)x->n, sizeof x->members[0], by_device);
    x->castable = well_formed(c, x);
    if (!x->castable) continue;
    rf_node *m0 = x->members[0];
    x->type = m0->out_dtypes[0];
    snprintf(x->reduction, sizeof x->reduction, "%s",
             attr(m0, "reduction", RF_ATTR_STRING)->u.s);
    x->shape = m0->out_shapes[0];
    x->count = rf_shape_num_elements(&m0->out_shapes[0]);
    for (int r = 0; r < x->n; r++) {
      rf_dtype w;
      RF_CHECK(wire_dtype(c, x->members[r], x->type, &w));
      if (r > 0 && w != x->wire) x->castable = false; /* checked later */
      if (r == 0) x->wire = w;
    }
    x->fusable = x->castable && one_shape(x);
    x->alone = x->fusable && copied_rank(c, x) >= 0;
  }
  return NULL;
}

static bool same_key(const group *a, const group *b) {
  if (a->type != b->type || a->wire != b->wire || a->n != b->n ||
      strcmp(a->reduction, b->reduction) != 0)
    return false;
  for (int r = 0; r < a->n; r++)
    if (a->members[r]->assigned_device != b->members[r]->assigned_device)
      return false;
  return true;
}

/* Bytes of a group's slice in its bucket: its elements rounded up to the
 * 64-byte boundary the next slice starts on. */
static int64_t slice_elems(const group *x) {
  int64_t align = RF_TENSOR_ALIGNMENT / (int64_t)rf_dtype_size(x->type);
  return (x->count + align - 1) / align * align;
}

/* Whether group x's devices belong to more than one task (its collective
 * goes across processes). */
static bool across_tasks(const bucket_ctx *c, const group *x) {
  int t0 = c->pc->devices[x->members[0]->assigned_device].name.task;
  for (int i = 1; i < x->n; i++)
    if (c->pc->devices[x->members[i]->assigned_device].name.task != t0)
      return true;
  return false;
}

/* The bucket size of group x's buckets, in bytes per device: the
 * session's, or under RF_BUCKET_BYTES_AUTO the default of its devices'
 * kind (a fusable group's devices are of one kind), and for CPU devices
 * whether it goes across processes. Every process decides alike: the
 * group's devices are the whole job's. */
static int64_t bucket_limit(const bucket_ctx *c, const group *x) {
  if (c->pc->bucket_bytes != RF_BUCKET_BYTES_AUTO) return c->pc->bucket_bytes;
  if (c->pc->devices[x->members[0]->assigned_device].name.type == RF_DEVICE_GPU)
    return RF_DEFAULT_BUCKET_BYTES_GPU;
  return across_tasks(c, x) ? RF_DEFAULT_BUCKET_BYTES_CPU_JOB
                            : RF_DEFAULT_BUCKET_BYTES_CPU;
}

typedef struct bucket {
  group *groups[MAX_PER_BUCKET];
  int n;
  int64_t elems; /* slices together */
  int64_t limit; /* bucket_limit of its groups, found before the rewrite
                  * (which removes the groups' members) */
} bucket;

/* Adds an internal node on device d named after base. */
static rf_status *add(bucket_ctx *c, const char *op_name, const char *base,
                      int d, const rf_output *inputs, int n,
                      const rf__attrs *attrs, rf_node **out) {
  const rf__op_def *op = rf__op_find(op_name);
  if (!op) return rf__internal("op %s is not registered", op_name);
  size_t len = strlen(base) + strlen(op_name) + 32;
  char *mem = rf__malloc(2 * len), *stem = mem, *name = mem + len;
  RF_CHECK_ALLOC(mem);
  snprintf(stem, len, "%s/%s", base, op_name);
  rf__graph_unique_name(c->g, stem, name, len);
  rf_status *st = rf__graph_add_node(
      c->g, op, name, c->pc->devices[d].canonical, inputs, n, attrs, out);
  rf__free(mem);
  RF_CHECK(st);
  (*out)->assigned_device = d;
  return NULL;
}

static rf_status *add_cast(bucket_ctx *c, const char *base, int d, rf_output x,
                           rf_dtype to, rf_output *out) {
  rf__attrs a = {0};
  rf__attr_value src = rf__attr_type_value(x.node->out_dtypes[x.index]);
  rf__attr_value dst = rf__attr_type_value(to);
  rf_status *st = rf__attrs_set(&a, "SrcT", &src);
  if (!st) st = rf__attrs_set(&a, "DstT", &dst);
  rf_node *n = NULL;
  if (!st) st = add(c, "Cast", base, d, &x, 1, &a, &n);
  rf__attrs_clear(&a);
  RF_CHECK(st);
  n->out_shapes[0] = x.node->out_shapes[x.index];
  *out = (rf_output){n, 0};
  return NULL;
}

/* Moves member m's edges onto its replacement: data consumers read
 * (to, slot), control consumers wait for `to`, m's control inputs go to
 * `first`; then m goes. */
static rf_status *replace(bucket_ctx *c, rf_node *m, rf_node *first,
                          rf_node *to, int slot) {
  for (int i = 0; i < m->num_in_edges; i++) {
    rf__edge *e = m->in_edges[i];
    if (e->dst_in == RF_CONTROL_SLOT &&
        !rf__graph_has_control_edge(e->src, first))
      RF_CHECK(rf__graph_add_edge(c->g, e->src, RF_CONTROL_SLOT, first,
                                  RF_CONTROL_SLOT));
  }
  while (m->num_out_edges > 0) {
    rf__edge *e = m->out_edges[m->num_out_edges - 1];
    rf_node *dst = e->dst;
    if (e->src_out != RF_CONTROL_SLOT) {
      RF_CHECK(rf__graph_update_edge(c->g, dst, e->dst_in, to, slot));
      continue;
    }
    rf__graph_remove_edge(c->g, e);
    if (!rf__graph_has_control_edge(to, dst))
      RF_CHECK(
          rf__graph_add_edge(c->g, to, RF_CONTROL_SLOT, dst, RF_CONTROL_SLOT));
  }
  rf__graph_remove_node(c->g, m);
  return NULL;
}

/* The attrs of a bucket's pack and unpack: T, N, offsets, and total and
 * limit, the size it was filled to (pack), or shapes (unpack). */
static rf_status *layout_attrs(const bucket *b, bool unpack, rf__attrs *a) {
  int64_t offsets[MAX_PER_BUCKET], off = 0;
  rf_shape shapes[MAX_PER_BUCKET];
  for (int j = 0; j < b->n; j++) {
    offsets[j] = off;
    off += slice_elems(b->groups[j]);
    shapes[j] = b->groups[j]->shape;
  }
  rf__attr_value t = rf__attr_type_value(b->groups[0]->type);
  rf__attr_value n = rf__attr_int(b->n);
  rf__attr_value o = rf__attr_int_list_ref(offsets, b->n);
  rf__attr_value total = rf__attr_int(off);
  rf__attr_value s = {.type = RF_ATTR_SHAPE_LIST, .n = b->n};
  s.u.shapes = shapes;
  RF_CHECK(rf__attrs_set(a, "T", &t));
  RF_CHECK(rf__attrs_set(a, "N", &n));
  RF_CHECK(rf__attrs_set(a, "offsets", &o));
  if (unpack) return rf__attrs_set(a, "shapes", &s);
  rf__attr_value limit = rf__attr_int(b->limit);
  RF_CHECK(rf__attrs_set(a, "limit", &limit));
  return rf__attrs_set(a, "total", &total);
}

/* The all-reduce of one rank of bucket b: pack (k > 1), cast to the wire
 * dtype (when narrower), the collective, cast back, unpack (k > 1). */
static rf_status *rewrite_rank(bucket_ctx *c, const bucket *b, int r,
                               const char *shared_name) {
  const group *x0 = b->groups[0];
  rf_node *m0 = x0->members[r];
  int d = m0->assigned_device;
  rf_output ins[MAX_PER_BUCKET], v = rf__input(m0, 0);
  for (int j = 0; j < b->n; j++)
    ins[j] = rf__input(b->groups[j]->members[r], 0);
  rf_node *first = NULL, *pack = NULL, *unpack = NULL, *ar = NULL;
  rf__attrs a = {0};
  rf_status *st = NULL;
  if (b->n > 1) {
    st = layout_attrs(b, false, &a);
    if (!st) st = add(c, "_BucketPack", m0->name, d, ins, b->n, &a, &pack);
    rf__attrs_clear(&a);
    RF_CHECK(st);
    pack->out_shapes[0] = rf_shape_of(1, b->elems);
    v = (rf_output){pack, 0};
  }
  if (x0->wire != x0->type) RF_CHECK(add_cast(c, m0->name, d, v, x0->wire, &v));
  first = pack ? pack : v.node != m0->data_in[0]->src ? v.node : NULL;
  rf__attr_value t = rf__attr_type_value(x0->wire);
  rf__attr_value red = rf__attr_string_ref(x0->reduction);
  rf__attr_value nd = rf__attr_int(x0->n);
  rf__attr_value sn = rf__attr_string_ref(shared_name);
  st = rf__attrs_set(&a, "T", &t);
  if (!st) st = rf__attrs_set(&a, "reduction", &red);
  if (!st) st = rf__attrs_set(&a, "num_devices", &nd);
  if (!st) st = rf__attrs_set(&a, "shared_name", &sn);
  if (!st) st = add(c, "AllReduce", m0->name, d, &v, 1, &a, &ar);
  rf__attrs_clear(&a);
  RF_CHECK(st);
  ar->out_shapes[0] = v.node->out_shapes[v.index];
  if (!first) first = ar;
  v = (rf_output){ar, 0};
  if (x0->wire != x0->type) RF_CHECK(add_cast(c, m0->name, d, v, x0->type, &v));
  if (b->n > 1) {
    st = layout_attrs(b, true, &a);
    if (!st) st = add(c, "_BucketUnpack", m0->name, d, &v, 1, &a, &unpack);
    rf__attrs_clear(&a);
    RF_CHECK(st);
    for (int j = 0; j < b->n; j++) unpack->out_shapes[j] = b->groups[j]->shape;
  }
  for (int j = 0; j < b->n; j++)
    RF_CHECK(replace(c, b->groups[j]->members[r], first,
                     unpack ? unpack : v.node, unpack ? j : v.index));
  return NULL;
}

static void log_bucket(const bucket_ctx *c, const bucket *b,
                       const char *shared_name) {
  const group *x = b->groups[0];
  size_t es = rf_dtype_size(x->type);
  int64_t data = 0;
  for (int j = 0; j < b->n; j++) data += b->groups[j]->count;
  char cast[96] = "";
  if (x->wire != x->type)
    snprintf(cast, sizeof cast, ", cast to %s for the wire and back",
             rf_dtype_name(x->wire));
  const char *why =
      c->pc->bucket_bytes != RF_BUCKET_BYTES_AUTO ? "collective_bucket_bytes"
      : c->pc->devices[x->members[0]->assigned_device].name.type ==
              RF_DEVICE_GPU
          ? "the default on GPU devices"
          : "the default on CPU devices";
  if (b->n > 1)
    rf__log_write(RF_LOG_INFO,
                  "compile %ld: bucket '%.200s': %d all-reduces (%s, %s) on %d "
                  "devices, %lld bytes + %lld padding: producers write into "
                  "the bucket, zero-copy views out (_BucketUnpack)%s; buckets "
                  "of up to %lld bytes (%s)",
                  c->pc->compile, shared_name, b->n, rf_dtype_name(x->type),
                  x->reduction, x->n, (long long)(data * (int64_t)es),
                  (long long)((b->elems - data) * (int64_t)es), cast,
                  (long long)bucket_limit(c, x), why);
  else if (x->count < 0)
    rf__log_write(RF_LOG_INFO,
                  "compile %ld: all-reduce '%.200s' (%s, %s) on %d devices, "
                  "its size known at run time%s",
                  c->pc->compile, shared_name, rf_dtype_name(x->type),
                  x->reduction, x->n, cast);
  else
    rf__log_write(RF_LOG_INFO,
                  "compile %ld: all-reduce '%.200s' (%s, %s) on %d devices, "
                  "%lld bytes%s",
                  c->pc->compile, shared_name, rf_dtype_name(x->type),
                  x->reduction, x->n, (long long)(data * (int64_t)es), cast);
}

static rf_status *rewrite(bucket_ctx *c, const bucket *b) {
  const char *sn0 = b->groups[0]->shared_name;
  size_t len = strlen(sn0) + 16;
  char *sn = rf__malloc(len);
  RF_CHECK_ALLOC(sn);
  /* '#' is reserved: no user's collective can meet a bucket's. */
  snprintf(sn, len, b->n > 1 ? "%s#bucket" : "%s", sn0);
  if (rf__log_on(RF_LOG_INFO)) log_bucket(c, b, sn);
  rf_status *st = NULL;
  for (int r = 0; r < b->groups[0]->n && !st; r++)
    st = rewrite_rank(c, b, r, sn);
  rf__free(sn);
  return st;
}

/* Greedy, in readiness order: a group joins the open bucket of its key when
 * it fits in its bucket size (bucket_limit) and is independent of it, else
 * opens the next; one larger than a bucket goes alone and closes the open
 * bucket. */
static rf_status *assign(bucket_ctx *c, group **ready, int n, bucket *buckets,
                         int *nbuckets) {
  int *open = rf__malloc(sizeof *open * (size_t)(n ? n : 1)), nopen = 0;
  RF_CHECK_ALLOC(open);
  for (int i = 0; i < n; i++) {
    group *x = ready[i];
    int64_t limit = bucket_limit(c, x);
    int64_t es = (int64_t)rf_dtype_size(x->type), sz = slice_elems(x);
    int k = 0;
    while (k < nopen && !same_key(buckets[open[k]].groups[0], x)) k++;
    bucket *b = k < nopen ? &buckets[open[k]] : NULL;
    if (b && !x->alone && limit > 0 && b->n < MAX_PER_BUCKET &&
        sz <= limit / es - b->elems &&
        independent(c, b->groups[0]->members[0]->id, x->members[0]->id)) {
      b->groups[b->n++] = x;
      b->elems += sz;
      unite(c, b->groups[0]->members[0]->id, x->members[0]->id);
      continue;
    }
    buckets[(*nbuckets)++] =
        (bucket){.groups = {x}, .n = 1, .elems = sz, .limit = limit};
    if (limit <= 0) continue;
    /* One larger than a bucket stays alone and closes the open bucket: the
     * groups in it meet as soon as they are ready, not when the next small
     * ones are (in a backward pass the layers before this one's). */
    if (sz > limit / es) {
      if (k < nopen) open[k] = open[--nopen];
      continue;
    }
    /* One whose copy in would cost more than fusing saves stays alone and
     * leaves the open bucket open. */
    if (x->alone) {
      log_alone(c, x);
      continue;
    }
    if (k == nopen) nopen++;
    open[k] = *nbuckets - 1;
  }
  rf__free(open);
  return NULL;
}

/* The prologue of decide and recorded: c's groups, collected in
 * topological order, and *buckets allocated for as many buckets. */
static rf_status *groups_and_room(bucket_ctx *c, bucket **buckets) {
  rf_node **order = NULL;
  int norder = 0;
  RF_CHECK(rf__topological_order(c->g, &order, &norder));
  rf_status *st = collect(c, order, norder);
  rf__free(order);
  RF_CHECK(st);
  *buckets = rf__malloc(sizeof **buckets * (size_t)(c->num_groups + 1));
  return *buckets ? NULL : rf__oom();
}

/* The groups of c's graph, in readiness order, into buckets (*out gets
 * rf__malloc'ed buckets, *n their count). */
static rf_status *decide(bucket_ctx *c, bucket **out, int *n) {
  bucket *buckets = NULL;
  RF_CHECK(groups_and_room(c, &buckets));
  group **ready = rf__malloc(sizeof *ready * (size_t)(c->num_groups + 1));
  rf_status *st = ready ? NULL : rf__oom();
  int nready = 0;
  *n = 0;
  for (int i = 0; !st && i < c->num_groups; i++)
    if (c->groups[i].fusable) ready[nready++] = &c->groups[i];
  if (!st) qsort(ready, (size_t)nready, sizeof *ready, by_ready);
  if (!st) st = assign(c, ready, nready, buckets, n);
  rf__free(ready);
  if (st) rf__free(buckets);
  *out = st ? NULL : buckets;
  return st;
}

/* The plan's attr on a job's participants: [bucket, slot in it]. */
#define PLAN_ATTR "_bucket"

/* The recorded place of fusable group x, or false when its participants
 * carry none (or disagree: a graph edited by hand). */
static bool planned(const group *x, int64_t *where) {
  for (int r = 0; r < x->n; r++) {
    const rf__attr_value *v = attr(x->members[r], PLAN_ATTR, RF_ATTR_INT_LIST);
    if (!v || v->n != 2 ||
        (r > 0 && (v->u.ints[0] != where[0] || v->u.ints[1] != where[1])))
      return false;
    where[0] = v->u.ints[0], where[1] = v->u.ints[1];
  }
  return true;
}

typedef struct placed {
  group *x;
  int64_t where[2];
} placed;

static int by_place(const void *a, const void *b) {
  const placed *x = a, *y = b;
  for (int i = 0; i < 2; i++)
    if (x->where[i] != y->where[i]) return x->where[i] < y->where[i] ? -1 : 1;
  return 0;
}

/* In a job: the buckets the plan recorded, of the groups this compile kept,
 * in the recorded order; unrecorded groups alone. */
static rf_status *recorded(bucket_ctx *c, bucket **out, int *n) {
  bucket *buckets = NULL;
  RF_CHECK(groups_and_room(c, &buckets));
  placed *p = rf__malloc(sizeof *p * (size_t)(c->num_groups + 1));
  if (!p) {
    rf__free(buckets);
    return rf__oom();
  }
  int np = 0;
  *n = 0;
  for (int i = 0; i < c->num_groups; i++) {
    group *x = &c->groups[i];
    if (!x->fusable) continue;
    p[np] = (placed){.x = x, .where = {-1, i}};
    if (!planned(x, p[np].where)) p[np].where[0] = -1 - i; /* alone */
    np++;
  }
  qsort(p, (size_t)np, sizeof *p, by_place);
  for (int i = 0; i < np; i++) {
    bucket *b = *n ? &buckets[*n - 1] : NULL;
    if (b && i > 0 && p[i].where[0] >= 0 &&
        p[i].where[0] == p[i - 1].where[0] && b->n < MAX_PER_BUCKET &&
        same_key(b->groups[0], p[i].x)) {
      b->groups[b->n++] = p[i].x;
      b->elems += slice_elems(p[i].x);
      continue;
    }
    buckets[(*n)++] = (bucket){.groups = {p[i].x},
                               .n = 1,
                               .elems = slice_elems(p[i].x),
                               .limit = bucket_limit(c, p[i].x)};
  }
  rf__free(p);
  *out = buckets;
  return NULL;
}

static rf_status *run(bucket_ctx *c) {
  bucket *buckets = NULL;
  int nbuckets = 0;
  RF_CHECK(c->pc->num_tasks > 1 ? recorded(c, &buckets, &nbuckets)
                                : decide(c, &buckets, &nbuckets));
  rf_status *st = NULL;
  for (int i = 0; !st && i < nbuckets; i++) {
    bucket *b = &buckets[i];
    if (b->n > 1 || b->groups[0]->wire != b->groups[0]->type)
      st = rewrite(c, b);
  }
  rf__free(buckets);
  /* A float32 all-reduce whose shape is known only at run time never
   * fuses, but still travels in its wire dtype. */
  for (int i = 0; !st && i < c->num_groups; i++) {
    group *x = &c->groups[i];
    if (x->castable && !x->fusable && x->wire != x->type)
      st = rewrite(c, &(bucket){.groups = {x}, .n = 1});
  }
  return st;
}

/* Records on every participant of a bucket of two or more groups its place:
 * [bucket, slot]. */
static rf_status *record(bucket_ctx *c) {
  bucket *buckets = NULL;
  int nbuckets = 0;
  RF_CHECK(decide(c, &buckets, &nbuckets));
  rf_status *st = NULL;
  for (int i = 0; !st && i < nbuckets; i++)
    for (int j = 0; !st && buckets[i].n > 1 && j < buckets[i].n; j++) {
      const group *x = buckets[i].groups[j];
      int64_t where[2] = {i, j};
      rf__attr_value v = rf__attr_int_list_ref(where, 2);
      for (int r = 0; !st && r < x->n; r++)
        st = rf__attrs_set(&x->members[r]->attrs, PLAN_ATTR, &v);
    }
  rf__free(buckets);
  return st;
}

/* Runs fn with a bucket_ctx over ctx's graph. */
static rf_status *with_ctx(rf__pass_ctx *ctx, rf_status *(*fn)(bucket_ctx *c)) {
  rf_graph *g = ctx->graph;
  bucket_ctx c = {.pc = ctx, .g = g};
  size_t ids = (size_t)g->num_ids + 1;
  c.groups = rf__malloc(sizeof *c.groups * ids);
  c.uf = rf__malloc(sizeof *c.uf * ids);
  c.ring = rf__malloc(sizeof *c.ring * ids);
  c.seen = rf__calloc(ids, sizeof *c.seen);
  c.stack = rf__malloc(sizeof *c.stack * ids);
  rf_status *st =
      c.groups && c.uf && c.ring && c.seen && c.stack ? fn(&c) : rf__oom();
  rf__free(c.groups);
  rf__free(c.uf);
  rf__free(c.ring);
  rf__free(c.seen);
  rf__free(c.stack);
  return st ? rf__status_prefix(st, "bucketing collectives") : NULL;
}

rf_status *rf__bucket_collectives(rf__pass_ctx *ctx) {
  return with_ctx(ctx, run);
}

rf_status *rf__bucket_collectives_plan(rf__pass_ctx *ctx) {
  return with_ctx(ctx, record);
}
