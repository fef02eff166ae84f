/* ops/index_ops.c - ops that pick elements by index or condition: Gather
 * (embedding lookup) with its scatter-add gradient _GatherGrad, OneHot, and
 * Select (TensorFlow's SelectV2: where(condition, t, e) with numpy
 * broadcasting). Registrations, shape functions (ops/index_shapes.h),
 * gradients and the public builders of ringflow/ops.h. */
#include "core/shape.h"
#include "ops/index_shapes.h"
#include "ops/math_ops.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static const rf_output invalid_output = {NULL, 0};

/* ---- shape functions ---- */

static rf_status *gather_shape(rf__shape_ctx *c) {
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  return rf__gather_shape(&c->input_shapes[0], &c->input_shapes[1], &axis,
                          &c->output_shapes[0]);
}

/* _GatherGrad(dy, indices, like): like's shape; dy must be what Gather of
 * like would give. */
static rf_status *gather_grad_shape(rf__shape_ctx *c) {
  int64_t axis;
  rf_shape want;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  RF_CHECK(
      rf__gather_shape(&c->input_shapes[2], &c->input_shapes[1], &axis, &want));
  const rf_shape *dy = &c->input_shapes[0];
  if (!rf__shape_compatible(dy, &want)) {
    char a[96], b[96];
    rf_shape_format(dy, a, sizeof a);
    rf_shape_format(&want, b, sizeof b);
    return rf__invalid("dy has shape %s but the gather gives %s", a, b);
  }
  c->output_shapes[0] = c->input_shapes[2];
  return NULL;
}

static rf_status *one_hot_shape(rf__shape_ctx *c) {
  int64_t depth, axis;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "depth", &depth));
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "axis", &axis));
  return rf__one_hot_shape(&c->input_shapes[0], depth, axis,
                           &c->output_shapes[0]);
}

static rf_status *select_shape(rf__shape_ctx *c) {
  return rf__select_shape(&c->input_shapes[0], &c->input_shapes[1],
                          &c->input_shapes[2], &c->output_shapes[0]);
}

/* ---- gradients ---- */

static rf_output gather_grad_node(rf_graph *g, rf_output dy, rf_output indices,
                                  rf_output like, int64_t axis) {
  rf_node_builder *b = rf_node_builder_new(g, "_GatherGrad", NULL);
  rf_node_builder_input(b, dy);
  rf_node_builder_input(b, indices);
  rf_node_builder_input(b, like);
  rf_node_builder_attr_int(b, "axis", axis);
  return rf__finish_output(g, b);
}

/* dparams: dy scattered back onto the rows it was gathered from, summed
 * where an index repeats (TensorFlow's UnsortedSegmentSum, made dense).
 * Params of a non-float dtype carry none (as BatchMatMul's integers):
 * _GatherGrad sums floats only. */
static rf_status *gather_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_dtype t;
  RF_CHECK(rf__attrs_get_type(&c->op->attrs, "T", &t));
  if (!rf_dtype_is_float(t)) return NULL;
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->op->attrs, "axis", &axis));
  c->dx[0] = gather_grad_node(c->g, c->dy[0], rf__input(c->op, 1),
                              rf__input(c->op, 0), axis);
  return NULL;
}

/* The scatter-add is linear in dy: its gradient gathers. */
static rf_status *gather_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  int64_t axis;
  RF_CHECK(rf__attrs_get_int(&c->op->attrs, "axis", &axis));
  c->dx[0] = rf_gather(c->g, NULL, c->dy[0], rf__input(c->op, 1), axis);
  return NULL;
}

/* dt = dy where condition, de = dy elsewhere, each summed down to its
 * input's shape (broadcasting). */
static rf_status *select_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output cond = rf__input(c->op, 0);
  rf_output zeros = rf_zeros_like(c->g, NULL, c->dy[0]);
  rf_output dt = rf_select(c->g, NULL, cond, c->dy[0], zeros);
  rf_output de = rf_select(c->g, NULL, cond, zeros, c->dy[0]);
  c->dx[1] = rf__sum_to_shape_of(c->g, NULL, dt, rf__input(c->op, 1));
  c->dx[2] = rf__sum_to_shape_of(c->g, NULL, de, rf__input(c->op, 2));
  return NULL;
}

/* ---- registration ---- */

static const rf__op_spec index_ops[] = {
    {.name = "Gather",
     .inputs = "params: T, indices: Tindices",
     .outputs = "output: T",
     .attrs = "T: type in {@all}; Tindices: type in {int32, int64}; "
              "axis: int = 0",
     .shape = gather_shape,
     .grad = gather_grad},
    {.name = "_GatherGrad",
     .inputs = "dy: T, indices: Tindices, like: T",
     .outputs = "output: T",
     .attrs = "T: type in {@float}; Tindices: type in {int32, int64}; "
              "axis: int = 0",
     .shape = gather_grad_shape,
     .grad = gather_grad_grad},
    {.name = "OneHot",
     .inputs = "indices: TI",
     .outputs = "output: T",
     .attrs = "T: type in {@all}; TI: type in {uint8, int32, int64}; "
              "depth: int >= 0; on_value: float = 1; off_value: float = 0; "
              "axis: int = -1",
     .shape = one_hot_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "Select",
     .inputs = "condition: bool, t: T, e: T",
     .outputs = "output: T",
     .attrs = "T: type in {@all}",
     .shape = select_shape,
     .grad = select_grad},
};

rf_status *rf__register_index_ops(void) {
  for (size_t i = 0; i < sizeof index_ops / sizeof index_ops[0]; i++)
    RF_CHECK(rf__op_register(&index_ops[i]));
  return NULL;
}

/* ---- public builders ---- */

rf_output rf_gather(rf_graph *g, const char *name, rf_output params,
                    rf_output indices, int64_t axis) {
  rf_output in[2] = {params, indices};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Gather", name, in, 2))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Gather", name);
  rf_node_builder_input(b, params);
  rf_node_builder_input(b, indices);
  rf_node_builder_attr_int(b, "axis", axis);
  return rf__finish_output(g, b);
}

rf_output rf_one_hot(rf_graph *g, const char *name, rf_output indices,
                     int64_t depth, double on_value, double off_value,
                     int64_t axis, rf_dtype dtype) {
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "OneHot", name, &indices, 1))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "OneHot", name);
  rf_node_builder_input(b, indices);
  rf_node_builder_attr_int(b, "depth", depth);
  rf_node_builder_attr_float(b, "on_value", on_value);
  rf_node_builder_attr_float(b, "off_value", off_value);
  rf_node_builder_attr_int(b, "axis", axis);
  rf_node_builder_attr_dtype(b, "T", dtype);
  return rf__finish_output(g, b);
}

rf_output rf_select(rf_graph *g, const char *name, rf_output condition,
                    rf_output t, rf_output e) {
  rf_output in[3] = {condition, t, e};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Select", name, in, 3))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Select", name);
  for (int i = 0; i < 3; i++) rf_node_builder_input(b, in[i]);
  return rf__finish_output(g, b);
}
