/* ops/reduction_ops.c - Sum, Mean, ArgMax and the internal gradient ops
 * _SumGrad and _MeanGrad: signatures, shape functions, gradients and the public
 * builders rf_sum, rf_mean, rf_argmax.
 *
 * The public "naxes < 0 means every axis" is the attr all_axes, so a graph of
 * unknown rank still says what it reduces; axes are checked against the rank
 * whenever it is known (here at build time, in the kernels at run time). */
#include "core/status.h"
#include "graph/graph.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ops/reduction_axes.h"
#include "ringflow/ops.h"

#define REDUCE_ATTRS \
  "axes: list(int); all_axes: bool = false; keep_dims: bool = false"

static const rf_output no_output = {NULL, 0};

/* ---- shape functions ---- */

/* Output of reducing input_shapes[x_index] by the node's reduction attrs. */
static rf_status *reduced_shape_of(rf__shape_ctx *c, int x_index,
                                   rf_shape *out) {
  rf__reduction_attrs r;
  RF_CHECK(rf__reduction_attrs_read(&c->node->attrs, &r));
  const rf_shape *in = &c->input_shapes[x_index];
  if (in->rank == RF_UNKNOWN_RANK) {
    *out = r.all_axes && !r.keep_dims ? rf_shape_scalar() : rf_shape_unknown();
    return NULL;
  }
  uint32_t mask;
  RF_CHECK(rf__reduction_mask(&r, in->rank, &mask));
  *out = rf__reduced_shape(in, mask, r.keep_dims);
  return NULL;
}

static rf_status *reduce_shape(rf__shape_ctx *c) {
  return reduced_shape_of(c, 0, &c->output_shapes[0]);
}

/* True when a and b (known ranks) cannot describe the same tensor. */
static bool shapes_conflict(const rf_shape *a, const rf_shape *b) {
  if (a->rank < 0 || b->rank < 0) return false;
  if (a->rank != b->rank) return true;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i])
      return true;
  return false;
}

/* _SumGrad / _MeanGrad (dy, x) -> dx shaped like x. dy must look like x
 * reduced; with keep_dims unknown to the caller, either form is accepted. */
static rf_status *reduce_grad_shape(rf__shape_ctx *c) {
  rf_shape want;
  RF_CHECK(reduced_shape_of(c, 1, &want));
  const rf_shape *dy = &c->input_shapes[0];
  if (shapes_conflict(dy, &want)) {
    char a[96], b[96], x[96];
    rf_shape_format(dy, a, sizeof a);
    rf_shape_format(&want, b, sizeof b);
    rf_shape_format(&c->input_shapes[1], x, sizeof x);
    return rf__invalid("dy has shape %s but reducing x %s gives %s", a, x, b);
  }
  c->output_shapes[0] = c->input_shapes[1];
  return NULL;
}

static rf_status *argmax_shape(rf__shape_ctx *c) {
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  const rf_shape *in = &c->input_shapes[0];
  if (in->rank == RF_UNKNOWN_RANK) return NULL;
  if (in->rank == 0)
    return rf__invalid("ArgMax needs an input of rank >= 1, got a scalar");
  if (axis < -in->rank || axis >= in->rank)
    return rf__invalid(
        "axis %lld is out of range for an input of rank %d (valid: [%d, %d))",
        (long long)axis, in->rank, -in->rank, in->rank);
  int k = (int)(axis < 0 ? axis + in->rank : axis);
  rf_shape out = rf__reduced_shape(in, 1u << k, false);
  if (in->dims[k] == 0 && rf_shape_num_elements(&out) > 0)
    return rf__invalid("ArgMax over axis %d of length 0", k);
  c->output_shapes[0] = out;
  return NULL;
}

/* ---- gradients ---- */

static void copy_reduction_attrs(rf_node_builder *b,
                                 const rf__reduction_attrs *r) {
  static const int64_t none = 0;
  rf_node_builder_attr_int_list(b, "axes", r->axes ? r->axes : &none, r->naxes);
  rf_node_builder_attr_bool(b, "all_axes", r->all_axes);
  rf_node_builder_attr_bool(b, "keep_dims", r->keep_dims);
}

/* A node of op (`first`, `second`) carrying fwd's reduction attrs. */
static rf_output build_reduction(rf_graph *g, const char *op, rf_output first,
                                 rf_output second, const rf_node *fwd) {
  rf__reduction_attrs r;
  rf_status *st = rf__reduction_attrs_read(&fwd->attrs, &r);
  if (st) {
    rf__graph_record(g, st);
    return no_output;
  }
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  rf_node_builder_input(b, first);
  if (second.node) rf_node_builder_input(b, second);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(first));
  copy_reduction_attrs(b, &r);
  return rf__finish_output(g, b);
}

/* Sum / Mean: dx = dy broadcast back over the reduced axes (/ count). */
static rf_status *sum_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] =
      build_reduction(c->g, "_SumGrad", c->dy[0], rf__input(c->op, 0), c->op);
  return NULL;
}

static rf_status *mean_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] =
      build_reduction(c->g, "_MeanGrad", c->dy[0], rf__input(c->op, 0), c->op);
  return NULL;
}

/* _SumGrad is linear in dy, and its adjoint is Sum itself (Mean likewise);
 * x only lends its shape, so it gets no gradient. */
static rf_status *sum_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = build_reduction(c->g, "Sum", c->dy[0], no_output, c->op);
  return NULL;
}

static rf_status *mean_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = build_reduction(c->g, "Mean", c->dy[0], no_output, c->op);
  return NULL;
}

/* ---- registration ---- */

static const rf__op_spec specs[] = {
    {.name = "Sum",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = "T: type in {@numeric}; " REDUCE_ATTRS,
     .shape = reduce_shape,
     .grad = sum_grad},
    {.name = "Mean",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = "T: type in {@numeric}; " REDUCE_ATTRS,
     .shape = reduce_shape,
     .grad = mean_grad},
    {.name = "ArgMax",
     .inputs = "input: T",
     .outputs = "output: int64",
     .attrs = "T: type in {@numeric}; axis: int",
     .shape = argmax_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "_SumGrad",
     .inputs = "dy: T, x: T",
     .outputs = "dx: T",
     .attrs = "T: type in {@numeric}; " REDUCE_ATTRS,
     .shape = reduce_grad_shape,
     .grad = sum_grad_grad},
    {.name = "_MeanGrad",
     .inputs = "dy: T, x: T",
     .outputs = "dx: T",
     .attrs = "T: type in {@numeric}; " REDUCE_ATTRS,
     .shape = reduce_grad_shape,
     .grad = mean_grad_grad},
};

rf_status *rf__register_reduction_ops(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    RF_CHECK(rf__op_register(&specs[i]));
  return NULL;
}

/* ---- public builders ---- */

static rf_output reduce(rf_graph *g, const char *op, const char *name,
                        rf_output x, const int64_t *axes, int naxes,
                        bool keep_dims) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, &x, 1))
    return no_output;
  if (naxes > 0 && !axes) {
    rf__graph_refuse(g, op, name, "axes is NULL but naxes is %d", naxes);
    return no_output;
  }
  rf__reduction_attrs r = {axes, naxes < 0 ? 0 : naxes, naxes < 0, keep_dims};
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(x));
  copy_reduction_attrs(b, &r);
  return rf__finish_output(g, b);
}

rf_output rf_sum(rf_graph *g, const char *name, rf_output x,
                 const int64_t *axes, int naxes, bool keep_dims) {
  return reduce(g, "Sum", name, x, axes, naxes, keep_dims);
}

rf_output rf_mean(rf_graph *g, const char *name, rf_output x,
                  const int64_t *axes, int naxes, bool keep_dims) {
  return reduce(g, "Mean", name, x, axes, naxes, keep_dims);
}

rf_output rf_argmax(rf_graph *g, const char *name, rf_output x, int64_t axis) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "ArgMax", name, &x, 1))
    return no_output;
  rf_node_builder *b = rf_node_builder_new(g, "ArgMax", name);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(x));
  rf_node_builder_attr_int(b, "axis", axis);
  return rf__finish_output(g, b);
}
