/* passes/fold_constants.c - the POST_PLACEMENT pass that computes, once at
 * compile time, the values a step would otherwise compute from shapes alone
 * (docs/ARCHITECTURE.md, "Passes"). A loss's gradient starts as OnesLike of
 * the scalar loss, and the Mean's gradient broadcasts that 1 divided by the
 * batch over the batch: two kernels every step (on a GPU, two launches of
 * a replayed step) for a value that only the static shapes decide.
 *
 * Folded, while the output's shape is fully known and holds at most
 * RF_FOLD_MAX_BYTES:
 *   - OnesLike(x), ZerosLike(x): x's shape and dtype;
 *   - _SumGrad(dy, x), _MeanGrad(dy, x) with all_axes, dy a Const of the
 *     reduced shape (a scalar, or x's rank of 1s with keep_dims): dy (or dy
 *     divided by x's element count, as the kernels divide: in double rounded
 *     once, 16-bit floats through float, integers truncating) in every
 *     element of x's shape.
 * Each becomes a Const on the node's device with the same control inputs
 * and consumers, named "<name>/folded"; a fold can make another foldable
 * (OnesLike feeds _MeanGrad), so the pass repeats until nothing changes.
 * The values are bit for bit those the kernels compute. A Const costs no
 * kernel: a CPU device hands out its tensor, a GPU device copies it once
 * per session. Environment variable RF_FOLD_CONSTANTS=0 turns the pass off
 * (for measuring it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "graph/attrs.h"
#include "graph/graph.h"
#include "ops/op_registry.h"
#include "passes/node_match.h"
#include "passes/fold_constants.h"

/* Stores v as one element of dtype t at p, as a Cast from float64 would
 * (the element value of OnesLike and ZerosLike: 0 or 1 in every dtype). */
static void store_small(rf_dtype t, double v, void *p) {
  switch (t) {
    case RF_FLOAT16: *(uint16_t *)p = rf_float_to_half((float)v); break;
    case RF_BFLOAT16: *(uint16_t *)p = rf_float_to_bfloat16((float)v); break;
    case RF_FLOAT32: *(float *)p = (float)v; break;
    case RF_FLOAT64: *(double *)p = v; break;
    case RF_INT8: *(int8_t *)p = (int8_t)v; break;
    case RF_UINT8: *(uint8_t *)p = (uint8_t)v; break;
    case RF_BOOL: *(uint8_t *)p = v != 0; break;
    case RF_INT32: *(int32_t *)p = (int32_t)v; break;
    default: *(int64_t *)p = (int64_t)v; break;
  }
}

/* dy (one element at s) divided by count into p, as Mean divides and the
 * _MeanGrad kernels do (kernels/cpu/reduction_kernels.c, scaled_copy). */
static void store_divided(rf_dtype t, const void *s, int64_t count, void *p) {
  double c = (double)count;
  switch (t) {
    case RF_FLOAT16:
      *(uint16_t *)p =
          rf_float_to_half((float)(rf_half_to_float(*(const uint16_t *)s) / c));
      break;
    case RF_BFLOAT16:
      *(uint16_t *)p = rf_float_to_bfloat16(
          (float)(rf_bfloat16_to_float(*(const uint16_t *)s) / c));
      break;
    case RF_FLOAT32: *(float *)p = (float)(*(const float *)s / c); break;
    case RF_FLOAT64: *(double *)p = *(const double *)s / c; break;
    case RF_INT8: *(int8_t *)p = (int8_t)(*(const int8_t *)s / count); break;
    case RF_UINT8:
      *(uint8_t *)p = (uint8_t)(*(const uint8_t *)s / count);
      break;
    case RF_INT32:
      *(int32_t *)p = (int32_t)(*(const int32_t *)s / count);
      break;
    default: *(int64_t *)p = *(const int64_t *)s / count; break;
  }
}

/* Whether shape s (of dtype t) is small enough to hold as a constant. */
static bool foldable_shape(const rf_shape *s, rf_dtype t) {
  if (!rf_shape_is_fully_defined(s)) return false;
  int64_t n = rf_shape_num_elements(s);
  size_t es = rf_dtype_size(t);
  return n >= 0 && es && n <= (int64_t)(RF_FOLD_MAX_BYTES / es);
}

/* For _SumGrad / _MeanGrad: dy's Const value when it is the one element
 * that all_axes reduces x to, else NULL. */
static const rf_tensor *reduced_scalar(const rf_node *n) {
  if (!rf__node_flag(n, "all_axes") || !n->data_in[0] || !n->data_in[1])
    return NULL;
  const rf_tensor *dy = rf__node_const_value(n->data_in[0]->src);
  const rf_shape *x = &n->out_shapes[0];
  if (!dy || dy->dtype != n->out_dtypes[0] || x->rank == RF_UNKNOWN_RANK)
    return NULL;
  rf_shape want = rf_shape_scalar();
  if (rf__node_flag(n, "keep_dims")) {
    want.rank = x->rank;
    for (int i = 0; i < x->rank; i++) want.dims[i] = 1;
  }
  return rf_shape_equal(&dy->shape, &want) ? dy : NULL;
}

/* The value n computes, when it can be known now: *out (new) or NULL. */
static rf_status *fold_value(const rf_node *n, rf_tensor **out) {
  *out = NULL;
  if (n->num_outputs != 1 || n->assigned_device < 0) return NULL;
  rf_dtype t = n->out_dtypes[0];
  const rf_shape *shape = &n->out_shapes[0];
  bool ones = rf__node_is(n, "OnesLike"), zeros = rf__node_is(n, "ZerosLike");
  bool sum = rf__node_is(n, "_SumGrad"), mean = rf__node_is(n, "_MeanGrad");
  if ((!ones && !zeros && !sum && !mean) || t == RF_RESOURCE) return NULL;
  if (!foldable_shape(shape, t)) return NULL;
  const rf_tensor *dy = NULL;
  if ((sum || mean) && !(dy = reduced_scalar(n))) return NULL;
  size_t es = rf_dtype_size(t);
  unsigned char one[8];
  int64_t count = rf_shape_num_elements(shape);
  if (ones || zeros)
    store_small(t, ones ? 1.0 : 0.0, one);
  else if (mean && count > 1)
    store_divided(t, dy->data, count, one);
  else
    memcpy(one, dy->data, es);
  rf_tensor *v;
  RF_CHECK(rf_tensor_new(t, shape, NULL, &v));
  unsigned char *p = rf_tensor_mutable_data(v);
  for (int64_t i = 0; i < count; i++) memcpy(p + (size_t)i * es, one, es);
  *out = v;
  return NULL;
}

/* Replaces n by a Const of value v (not taken) on its device, with n's
 * control inputs and consumers. On error the graph is unchanged. */
static rf_status *replace(rf_graph *g, rf_node *n, rf_tensor *v,
                          const rf__op_def *const_op) {
  rf__attrs a = {0};
  rf__attr_value tv = rf__attr_tensor_ref(v),
                 dt = rf__attr_type_value(v->dtype);
  rf_status *st = rf__attrs_set(&a, "value", &tv);
  if (!st) st = rf__attrs_set(&a, "dtype", &dt);
  size_t len = strlen(n->name) + 32; /* "<name>/folded_<k>" */
  char *stem = rf__malloc(2 * len), *name = stem ? stem + len : NULL;
  if (!st && !stem) st = rf__oom();
  rf_node *k = NULL;
  if (!st) {
    snprintf(stem, len, "%s/folded", n->name);
    rf__graph_unique_name(g, stem, name, len);
    st = rf__graph_add_node(g, const_op, name, n->requested_device, NULL, 0, &a,
                            &k);
  }
  rf__free(stem);
  rf__attrs_clear(&a);
  RF_CHECK(st);
  k->assigned_device = n->assigned_device;
  k->out_shapes[0] = v->shape;
  /* control inputs, then every consumer, moved over */
  for (int i = 0; i < n->num_in_edges && !st; i++) {
    rf__edge *e = n->in_edges[i];
    if (e->dst_in == RF_CONTROL_SLOT)
      st = rf__graph_add_edge(g, e->src, RF_CONTROL_SLOT, k, RF_CONTROL_SLOT);
  }
  int m = n->num_out_edges;
  rf__edge **edges = rf__malloc(sizeof *edges * (size_t)(m ? m : 1));
  rf_node **srcs = rf__malloc(sizeof *srcs * (size_t)(m ? m : 1));
  int *outs = rf__calloc((size_t)(m ? m : 1), sizeof *outs);
  if (!st && (!edges || !srcs || !outs)) st = rf__oom();
  if (!st) {
    for (int i = 0; i < m; i++) edges[i] = n->out_edges[i], srcs[i] = k;
    st = rf__graph_redirect_edges(g, n, edges, srcs, outs, m);
  }
  rf__free(edges);
  rf__free(srcs);
  rf__free(outs);
  if (st) {
    rf__graph_remove_node(g, k);
    return st;
  }
  char shape[96];
  rf_shape_format(&v->shape, shape, sizeof shape);
  RF__LOG(RF_LOG_INFO,
          "node '%.200s' (%s) folded at compile time into Const '%.200s' "
          "of shape %s: it computes from static shapes alone",
          n->name, n->op->name, k->name, shape);
  rf__graph_remove_node(g, n);
  return NULL;
}

rf_status *rf__fold_constants(rf__pass_ctx *ctx) {
  const char *env = getenv("RF_FOLD_CONSTANTS");
  if (env && strcmp(env, "0") == 0) return NULL;
  const rf__op_def *const_op = rf__op_find("Const");
  if (!const_op) return rf__internal("op Const is not registered");
  rf_graph *g = ctx->graph;
  for (bool changed = true; changed;) {
    changed = false;
    for (int id = 0; id < g->num_ids; id++) {
      rf_node *n = g->nodes[id];
      if (!n) continue;
      rf_tensor *v;
      RF_CHECK(fold_value(n, &v));
      if (!v) continue;
      rf_status *st = replace(g, n, v, const_op);
      rf_tensor_release(v);
      RF_CHECK(st);
      changed = true;
    }
  }
  return NULL;
}
