/* ops/shape_ops.c - ops that move elements without arithmetic: Transpose,
 * Concat, Split, Slice, ExpandDims, Squeeze, Pad, Tile, and the internal ops
 * their gradients are made of (_PadTo, _SliceTo, _SplitLike, _TileGrad).
 * Their registrations, shape functions (ops/shape_op_shapes.h), gradients
 * and the public builders of ringflow/ops.h. Index arguments (perm, begin,
 * paddings, ...) are attrs, not tensors, so shapes are inferred at build
 * time; gradient ops take the forward input as a `like` input where they
 * need its run-time shape, so gradients work on shapes known only when the
 * graph runs. */
#include <stdlib.h>

#include "core/mem.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ops/shape_op_shapes.h"
#include "ringflow/ops.h"

static const rf_output invalid_output = {NULL, 0};

/* An int-list attr of the node. */
static rf_status *ints(const rf_node *n, const char *attr, const int64_t **v,
                       int *len) {
  return rf__attrs_get_int_list(&n->attrs, attr, v, len);
}

/* ---- shape functions ---- */

/* Output 0 as fn makes it from input 0 and the int-list attr `attr`. */
static rf_status *list_shape(rf__shape_ctx *c, const char *attr,
                             rf_status *(*fn)(const rf_shape *, const int64_t *,
                                              int, rf_shape *)) {
  const int64_t *v;
  int n;
  RF_CHECK(ints(c->node, attr, &v, &n));
  return fn(&c->input_shapes[0], v, n, &c->output_shapes[0]);
}

static rf_status *transpose_shape(rf__shape_ctx *c) {
  return list_shape(c, "perm", rf__transpose_shape);
}

static rf_status *concat_shape(rf__shape_ctx *c) {
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  return rf__concat_shape(c->input_shapes, c->num_inputs, axis,
                          &c->output_shapes[0]);
}

static rf_status *split_shape(rf__shape_ctx *c) {
  int64_t axis;
  const int64_t *sizes;
  int n;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  RF_CHECK(ints(c->node, "size_splits", &sizes, &n));
  return rf__split_shapes(&c->input_shapes[0], axis, c->num_outputs, sizes, n,
                          c->output_shapes);
}

static rf_status *slice_shape(rf__shape_ctx *c) {
  const int64_t *begin, *size;
  int nb, ns;
  RF_CHECK(ints(c->node, "begin", &begin, &nb));
  RF_CHECK(ints(c->node, "size", &size, &ns));
  return rf__slice_shape(&c->input_shapes[0], begin, nb, size, ns,
                         &c->output_shapes[0]);
}

static rf_status *expand_dims_shape(rf__shape_ctx *c) {
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  return rf__expand_dims_shape(&c->input_shapes[0], axis, &c->output_shapes[0]);
}

static rf_status *squeeze_shape(rf__shape_ctx *c) {
  return list_shape(c, "squeeze_dims", rf__squeeze_shape);
}

static rf_status *pad_shape(rf__shape_ctx *c) {
  return list_shape(c, "paddings", rf__pad_shape);
}

static rf_status *tile_shape(rf__shape_ctx *c) {
  return list_shape(c, "multiples", rf__tile_shape);
}

static rf_status *tile_grad_shape(rf__shape_ctx *c) {
  const int64_t *m;
  int n;
  RF_CHECK(ints(c->node, "multiples", &m, &n));
  return rf__tile_grad_shape(&c->input_shapes[0], &c->input_shapes[1], m, n,
                             &c->output_shapes[0]);
}

/* _PadTo(x, like) and _SliceTo(x, like): like's shape, input `inner` a
 * window at begin inside input 1 - inner. _PadTo places x inside zeros of
 * like's shape (inner 0); _SliceTo takes like's window out of x (inner 1). */
static rf_status *window_shape(rf__shape_ctx *c, int inner) {
  const int64_t *begin;
  int n;
  RF_CHECK(ints(c->node, "begin", &begin, &n));
  RF_CHECK(rf__window_check(&c->input_shapes[1 - inner],
                            &c->input_shapes[inner], begin, n));
  c->output_shapes[0] = c->input_shapes[1];
  return NULL;
}

static rf_status *pad_to_shape(rf__shape_ctx *c) { return window_shape(c, 0); }

static rf_status *slice_to_shape(rf__shape_ctx *c) {
  return window_shape(c, 1);
}

/* _SplitLike(value, like[N]): output i is value's slab along axis as wide
 * as like[i] is there; the widths must add up to value's. */
static rf_status *split_like_shape(rf__shape_ctx *c) {
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  int n = c->num_outputs;
  int64_t *sizes = rf__malloc(sizeof *sizes * (size_t)n);
  RF_CHECK_ALLOC(sizes);
  const rf_shape *v = &c->input_shapes[0];
  bool known = true;
  int64_t a = axis;
  rf_status *st = rf__normalize_axis(&a, v->rank, "axis");
  for (int i = 0; !st && i < n; i++) {
    const rf_shape *l = &c->input_shapes[1 + i];
    sizes[i] = v->rank >= 0 && l->rank == v->rank ? l->dims[a] : -1;
    known = known && sizes[i] >= 0;
  }
  if (!st)
    st = rf__split_shapes(v, axis, n, known ? sizes : NULL, known ? n : 0,
                          c->output_shapes);
  if (st && !known) { /* equal pieces were only a guess */
    rf_status_free(st);
    st = NULL;
    for (int i = 0; i < n; i++) {
      c->output_shapes[i] = *v;
      if (v->rank > 0) c->output_shapes[i].dims[a] = sizes[i];
    }
  } else if (!st && !known) {
    for (int i = 0; i < n; i++)
      if (v->rank > 0) c->output_shapes[i].dims[a] = sizes[i];
  }
  rf__free(sizes);
  return st;
}

/* ---- gradients ---- */

/* A node of internal op `op` on inputs in[0, n), T from in[0]. */
static rf_node_builder *internal(rf_graph *g, const char *op,
                                 const rf_output *in, int n) {
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  return b;
}

/* op (_PadTo or _SliceTo) of x to like's shape at begin[0, n). */
static rf_output window_to(rf_graph *g, const char *op, rf_output x,
                           rf_output like, const int64_t *begin, int n) {
  rf_output in[2] = {x, like};
  rf_node_builder *b = internal(g, op, in, 2);
  rf_node_builder_attr_int_list(b, "begin", begin, n);
  return rf__finish_output(g, b);
}

static rf_status *transpose_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  const int64_t *perm;
  int n;
  RF_CHECK(ints(c->op, "perm", &perm, &n));
  int64_t inv[RF_MAX_RANK];
  for (int i = 0; i < n; i++) inv[perm[i]] = i;
  c->dx[0] = rf_transpose(c->g, NULL, c->dy[0], inv, n);
  return NULL;
}

/* dy split back into pieces as wide as each input along axis. */
static rf_status *concat_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->op->attrs, "axis", &axis));
  int n = c->op->num_inputs;
  rf_node_builder *b = rf_node_builder_new(c->g, "_SplitLike", NULL);
  rf_node_builder_input(b, c->dy[0]);
  rf_output *like = rf__malloc(sizeof *like * (size_t)n);
  RF_CHECK_ALLOC(like);
  for (int i = 0; i < n; i++) like[i] = rf__input(c->op, i);
  rf_node_builder_input_list(b, like, n);
  rf__free(like);
  rf_node_builder_attr_int(b, "axis", axis);
  rf_node *node = rf__finish_node(c->g, b);
  if (!node) return NULL; /* recorded in the graph */
  for (int i = 0; i < n; i++) c->dx[i] = (rf_output){node, i};
  return NULL;
}

/* Concat of the outputs' gradients (zeros where none flows) along axis.
 * Shared by Split and _SplitLike, whose input 0 is the one split. */
static rf_status *split_grad(rf__grad_ctx *c) {
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->op->attrs, "axis", &axis));
  int n = c->op->num_outputs;
  bool any = false;
  for (int i = 0; i < n; i++) any = any || c->dy[i].node;
  if (!any) return NULL;
  rf_output *parts = rf__malloc(sizeof *parts * (size_t)n);
  RF_CHECK_ALLOC(parts);
  for (int i = 0; i < n; i++)
    parts[i] = c->dy[i].node ? c->dy[i]
                             : rf_zeros_like(c->g, NULL, (rf_output){c->op, i});
  c->dx[0] = rf_concat(c->g, NULL, parts, n, axis);
  rf__free(parts);
  return NULL;
}

/* ExpandDims, Squeeze: dy reshaped to x's run-time shape. */
static rf_status *reshape_like_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output shape = rf_shape_of_op(c->g, NULL, rf__input(c->op, 0), RF_INT64);
  c->dx[0] = rf_reshape(c->g, NULL, c->dy[0], shape);
  return NULL;
}

static rf_status *pad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  const int64_t *p;
  int n;
  RF_CHECK(ints(c->op, "paddings", &p, &n));
  int64_t begin[RF_MAX_RANK];
  for (int i = 0; i < n / 2; i++) begin[i] = p[2 * i];
  c->dx[0] =
      window_to(c->g, "_SliceTo", c->dy[0], rf__input(c->op, 0), begin, n / 2);
  return NULL;
}

static rf_status *tile_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  const int64_t *m;
  int n;
  RF_CHECK(ints(c->op, "multiples", &m, &n));
  rf_output in[2] = {c->dy[0], rf__input(c->op, 0)};
  rf_node_builder *b = internal(c->g, "_TileGrad", in, 2);
  rf_node_builder_attr_int_list(b, "multiples", m, n);
  c->dx[0] = rf__finish_output(c->g, b);
  return NULL;
}

/* The gradient of a sum over tiles is the tiling of the gradient. */
static rf_status *tile_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  const int64_t *m;
  int n;
  RF_CHECK(ints(c->op, "multiples", &m, &n));
  c->dx[0] = rf_tile(c->g, NULL, c->dy[0], m, n);
  return NULL;
}

/* Slice, _PadTo and _SliceTo: x's gradient is dy through `other` (the
 * window op that undoes the node's), to x's shape at the same begin. */
static rf_status *window_grad(rf__grad_ctx *c, const char *other) {
  if (!c->dy[0].node) return NULL;
  const int64_t *begin;
  int n;
  RF_CHECK(ints(c->op, "begin", &begin, &n));
  c->dx[0] = window_to(c->g, other, c->dy[0], rf__input(c->op, 0), begin, n);
  return NULL;
}

static rf_status *pad_to_grad(rf__grad_ctx *c) {
  return window_grad(c, "_SliceTo");
}

/* Slice and _SliceTo: dy placed at begin inside zeros of x's shape. */
static rf_status *slice_grad(rf__grad_ctx *c) {
  return window_grad(c, "_PadTo");
}

/* ---- registration ---- */

#define ONE_IN_OUT .inputs = "input: T", .outputs = "output: T"

static const rf__op_spec shape_ops[] = {
    {.name = "Transpose",
     ONE_IN_OUT,
     .attrs = "T: type in {@all}; perm: list(int)",
     .shape = transpose_shape,
     .grad = transpose_grad},
    {.name = "Concat",
     .inputs = "values: N * T",
     .outputs = "output: T",
     .attrs = "T: type in {@all}; N: int >= 1; axis: int",
     .shape = concat_shape,
     .grad = concat_grad},
    {.name = "Split",
     .inputs = "value: T",
     .outputs = "output: num_split * T",
     .attrs = "T: type in {@all}; num_split: int >= 1; axis: int; "
              "size_splits: list(int) = []",
     .shape = split_shape,
     .grad = split_grad},
    {.name = "Slice",
     ONE_IN_OUT,
     .attrs = "T: type in {@all}; begin: list(int); size: list(int)",
     .shape = slice_shape,
     .grad = slice_grad},
    {.name = "ExpandDims",
     ONE_IN_OUT,
     .attrs = "T: type in {@all}; axis: int",
     .shape = expand_dims_shape,
     .grad = reshape_like_grad},
    {.name = "Squeeze",
     ONE_IN_OUT,
     .attrs = "T: type in {@all}; squeeze_dims: list(int) = []",
     .shape = squeeze_shape,
     .grad = reshape_like_grad},
    {.name = "Pad",
     ONE_IN_OUT,
     .attrs = "T: type in {@all}; paddings: list(int); "
              "constant_values: float = 0",
     .shape = pad_shape,
     .grad = pad_grad},
    {.name = "Tile",
     ONE_IN_OUT,
     .attrs = "T: type in {@all}; multiples: list(int)",
     .shape = tile_shape,
     .grad = tile_grad},
    {.name = "_TileGrad",
     .inputs = "dy: T, like: T",
     .outputs = "dx: T",
     .attrs = "T: type in {@numeric}; multiples: list(int)",
     .shape = tile_grad_shape,
     .grad = tile_grad_grad},
    {.name = "_PadTo",
     .inputs = "x: T, like: T",
     .outputs = "y: T",
     .attrs = "T: type in {@all}; begin: list(int)",
     .shape = pad_to_shape,
     .grad = pad_to_grad},
    {.name = "_SliceTo",
     .inputs = "x: T, like: T",
     .outputs = "y: T",
     .attrs = "T: type in {@all}; begin: list(int)",
     .shape = slice_to_shape,
     .grad = slice_grad},
    {.name = "_SplitLike",
     .inputs = "value: T, like: N * T",
     .outputs = "output: N * T",
     .attrs = "T: type in {@all}; N: int >= 1; axis: int",
     .shape = split_like_shape,
     .grad = split_grad},
};

rf_status *rf__register_shape_ops(void) {
  for (size_t i = 0; i < sizeof shape_ops / sizeof shape_ops[0]; i++)
    RF_CHECK(rf__op_register(&shape_ops[i]));
  return NULL;
}

/* ---- public builders ---- */

/* A builder for a one-input op with int-list attr `attr` = v[0, n), or NULL
 * when g failed, x is invalid or the list is malformed. */
static rf_node_builder *with_list(rf_graph *g, const char *op, const char *name,
                                  rf_output x, const char *attr,
                                  const int64_t *v, int n) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, &x, 1))
    return NULL;
  if (n < 0 || (n > 0 && !v)) {
    rf__graph_refuse(g, op, name, "%s must hold n >= 0 entries, got %d", attr,
                     n);
    return NULL;
  }
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  rf_node_builder_input(b, x);
  if (attr) rf_node_builder_attr_int_list(b, attr, v, n);
  return b;
}

static rf_output done(rf_graph *g, rf_node_builder *b) {
  return b ? rf__finish_output(g, b) : invalid_output;
}

rf_output rf_transpose(rf_graph *g, const char *name, rf_output x,
                       const int64_t *perm, int n) {
  int64_t rev[RF_MAX_RANK];
  if (!perm && !rf__graph_failed(g) &&
      rf__graph_inputs_ok(g, "Transpose", name, &x, 1)) {
    rf_shape s = rf_output_shape(x);
    if (s.rank < 0) {
      rf__graph_refuse(g, "Transpose", name,
                       "no perm (the dims reversed) needs x's rank known "
                       "when the node is built");
      return invalid_output;
    }
    n = s.rank;
    for (int i = 0; i < n; i++) rev[i] = n - 1 - i;
    perm = rev;
  }
  return done(g, with_list(g, "Transpose", name, x, "perm", perm, n));
}

rf_output rf_concat(rf_graph *g, const char *name, const rf_output *values,
                    int n, int64_t axis) {
  if (rf__graph_failed(g)) return invalid_output;
  if (n < 1 || !values) {
    rf__graph_refuse(g, "Concat", name, "needs n >= 1 values, got %d%s", n,
                     values ? "" : " (NULL values)");
    return invalid_output;
  }
  if (!rf__graph_inputs_ok(g, "Concat", name, values, n)) return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Concat", name);
  rf_node_builder_input_list(b, values, n);
  rf_node_builder_attr_int(b, "axis", axis);
  return rf__finish_output(g, b);
}

rf_node *rf_split_v(rf_graph *g, const char *name, rf_output x,
                    const int64_t *size_splits, int num_split, int64_t axis,
                    rf_output *outputs) {
  for (int i = 0; outputs && i < num_split; i++) outputs[i] = invalid_output;
  if (rf__graph_failed(g)) return NULL;
  if (num_split < 1 || !outputs) {
    rf__graph_refuse(g, "Split", name,
                     "needs num_split >= 1 and an outputs array, got %d",
                     num_split);
    return NULL;
  }
  rf_node_builder *b = with_list(g, "Split", name, x, "size_splits",
                                 size_splits, size_splits ? num_split : 0);
  if (!b) return NULL;
  rf_node_builder_attr_int(b, "num_split", num_split);
  rf_node_builder_attr_int(b, "axis", axis);
  rf_node *node = rf__finish_node(g, b);
  for (int i = 0; node && i < num_split; i++) outputs[i] = (rf_output){node, i};
  return node;
}

rf_node *rf_split(rf_graph *g, const char *name, rf_output x, int num_split,
                  int64_t axis, rf_output *outputs) {
  return rf_split_v(g, name, x, NULL, num_split, axis, outputs);
}

rf_output rf_slice(rf_graph *g, const char *name, rf_output x,
                   const int64_t *begin, const int64_t *size, int n) {
  if (!rf__graph_failed(g) && n > 0 && !size) {
    rf__graph_refuse(g, "Slice", name,
                     "size must hold n = %d entries, got NULL", n);
    return invalid_output;
  }
  rf_node_builder *b = with_list(g, "Slice", name, x, "begin", begin, n);
  if (b) rf_node_builder_attr_int_list(b, "size", size, n);
  return done(g, b);
}

rf_output rf_expand_dims(rf_graph *g, const char *name, rf_output x,
                         int64_t axis) {
  rf_node_builder *b = with_list(g, "ExpandDims", name, x, NULL, NULL, 0);
  if (b) rf_node_builder_attr_int(b, "axis", axis);
  return done(g, b);
}

rf_output rf_squeeze(rf_graph *g, const char *name, rf_output x,
                     const int64_t *axes, int n) {
  return done(g, with_list(g, "Squeeze", name, x, "squeeze_dims", axes, n));
}

rf_output rf_pad(rf_graph *g, const char *name, rf_output x,
                 const int64_t *paddings, int n, double constant_value) {
  rf_node_builder *b = with_list(g, "Pad", name, x, "paddings", paddings, n);
  if (b) rf_node_builder_attr_float(b, "constant_values", constant_value);
  return done(g, b);
}

rf_output rf_tile(rf_graph *g, const char *name, rf_output x,
                  const int64_t *multiples, int n) {
  return done(g, with_list(g, "Tile", name, x, "multiples", multiples, n));
}
