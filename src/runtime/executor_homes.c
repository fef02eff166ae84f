/* runtime/executor_homes.c - producers that write straight into a bucket
 * of fused all-reduces (passes/bucket_collectives.c, docs/COLLECTIVES.md
 * "Buckets"), so that _BucketPack has nothing to copy.
 *
 * At plan time each _BucketPack becomes a bucket, and every output that
 * feeds one of its inputs directly (the first such edge of that output) is
 * given a home: the slice of the bucket's flat tensor where the pack would
 * copy it. At run time the first producer of a step that allocates a homed
 * output makes the bucket's tensor (the device's allocator, as the pack
 * would) and every homed producer gets a view of its slice from
 * rf__kernel_alloc_output. The pack then finds those inputs already in
 * place and copies only the others: outputs that a kernel forwards rather
 * than allocates (a fed placeholder, Identity, a reshaped view, a _Recv),
 * a dtype or a shape that does not fit the slice. The pack takes the
 * bucket's tensor as its own output, so the tensor lives from the first
 * producer to the all-reduce, as the producers' separate outputs did.
 *
 * Views are safe to share: the all-reduce writes a new tensor, and a view
 * never counts as sole owner of its buffer (core/tensor.h), so no kernel
 * updates it in place while another consumer of the producer reads it. */
#include <string.h>

#include "core/mem.h"
#include "ops/op_registry.h"
#include "runtime/executor_internal.h"

/* slot -> producing (node, output), for the plan's data edges. */
typedef struct source {
  int node, out;
} source;

static rf_status *read_bucket(const xnode *x, xbucket *b,
                              const int64_t **offsets, int *n) {
  const rf__attrs *a = &x->node->attrs;
  RF_CHECK(rf__attrs_get_type(a, "T", &b->dtype));
  RF_CHECK(rf__attrs_get_int(a, "total", &b->total));
  RF_CHECK(rf__attrs_get_int_list(a, "offsets", offsets, n));
  if (*n != x->num_in)
    return rf__internal("node '%s' (_BucketPack): %d offsets for %d inputs",
                        x->node->name, *n, x->num_in);
  return NULL;
}

static void home_inputs(dplan *p, int b, const xnode *pack,
                        const int64_t *offsets, const source *from) {
  for (int j = 0; j < pack->num_in; j++) {
    source s = from[pack->in_base + j];
    if (s.node < 0) continue;
    xnode *u = &p->nodes[s.node];
    xhome *h = &p->homes[u->out_base + s.out];
    if (h->bucket >= 0) continue; /* feeds an earlier slice: copied here */
    if (strcmp(u->node->op->name, "_BucketPack") == 0) continue;
    int64_t end = j + 1 < pack->num_in ? offsets[j + 1] : p->buckets[b].total;
    *h = (xhome){b, offsets[j], end - offsets[j]};
    u->has_home = true;
  }
}

rf_status *rf__plan_homes(dplan *p) {
  for (int v = 0; v < p->num_nodes; v++)
    if (strcmp(p->nodes[v].node->op->name, "_BucketPack") == 0)
      p->num_buckets++;
  if (p->num_buckets == 0) return NULL;
  p->buckets = rf__calloc((size_t)p->num_buckets, sizeof(xbucket));
  p->homes =
      rf__malloc(sizeof(xhome) * (size_t)(p->num_outs ? p->num_outs : 1));
  source *from =
      rf__malloc(sizeof(source) * (size_t)(p->num_slots ? p->num_slots : 1));
  if (!p->buckets || !p->homes || !from) {
    rf__free(from);
    return rf__oom();
  }
  for (int o = 0; o < p->num_outs; o++) p->homes[o] = (xhome){-1, 0, 0};
  for (int i = 0; i < p->num_slots; i++) from[i] = (source){-1, 0};
  for (int v = 0; v < p->num_nodes; v++)
    for (int k = p->nodes[v].edge_begin; k < p->nodes[v].edge_end; k++)
      from[p->edges[k].slot] = (source){v, p->edges[k].src_out};
  rf_status *st = NULL;
  for (int v = 0, b = 0; v < p->num_nodes && !st; v++) {
    xnode *x = &p->nodes[v];
    if (strcmp(x->node->op->name, "_BucketPack") != 0) continue;
    const int64_t *offsets;
    int n;
    p->buckets[b].pack = v;
    st = read_bucket(x, &p->buckets[b], &offsets, &n);
    if (st) break;
    /* The pack's output is the whole tensor. */
    p->homes[x->out_base] = (xhome){b, 0, p->buckets[b].total};
    x->has_home = true;
    home_inputs(p, b, x, offsets, from);
    b++;
  }
  rf__free(from);
  return st;
}

/* This step's tensor of bucket b, made by the first caller. */
static rf_tensor *bucket_tensor(frame *f, int b) {
  rf_tensor *t =
      atomic_load_explicit(&f->bucket_tensors[b], memory_order_acquire);
  if (t) return t;
  const xbucket *bk = &f->plan->buckets[b];
  rf__device *dev = f->plan->device;
  rf_shape s = rf_shape_of(1, bk->total);
  rf_status *st = dev->name.type == RF_DEVICE_GPU
                      ? rf__tensor_new_device(bk->dtype, &s, dev->allocator, &t)
                      : rf_tensor_new(bk->dtype, &s, dev->allocator, &t);
  if (st) { /* the caller allocates as usual, and reports a failure */
    rf_status_free(st);
    return NULL;
  }
  rf_tensor *none = NULL;
  if (atomic_compare_exchange_strong_explicit(&f->bucket_tensors[b], &none, t,
                                              memory_order_acq_rel,
                                              memory_order_acquire))
    return t;
  rf_tensor_release(t); /* another producer made it first */
  return none;
}

rf_tensor *rf__executor_output_home(rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                                    const rf_shape *shape) {
  const node_ref *ref = ctx->executor_private;
  frame *f = ref->frame;
  const dplan *p = f->plan;
  const xnode *x = &p->nodes[ref->id];
  xhome h = p->homes[x->out_base + i];
  if (h.bucket < 0 || dtype != p->buckets[h.bucket].dtype ||
      !rf_shape_is_fully_defined(shape) ||
      rf_shape_num_elements(shape) > h.capacity)
    return NULL;
  if (p->buckets[h.bucket].pack == ref->id) { /* the pack takes the tensor */
    rf_tensor *t = atomic_exchange_explicit(&f->bucket_tensors[h.bucket], NULL,
                                            memory_order_acq_rel);
    if (t && !rf_shape_equal(&t->shape, shape)) {
      rf_tensor_release(t);
      return NULL;
    }
    return t; /* NULL when no producer wrote into it: a fresh tensor */
  }
  rf_tensor *t = bucket_tensor(f, h.bucket), *view = NULL;
  if (!t) return NULL;
  rf_status *st = rf__tensor_new_slice(t, h.offset, shape, &view);
  if (st) {
    rf_status_free(st);
    return NULL;
  }
  return view;
}

void rf__frame_drop_buckets(frame *f) {
  for (int b = 0; b < f->plan->num_buckets; b++)
    rf_tensor_release(atomic_exchange_explicit(&f->bucket_tensors[b], NULL,
                                               memory_order_acq_rel));
}
