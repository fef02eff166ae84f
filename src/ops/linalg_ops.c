/* ops/linalg_ops.c - BatchMatMul (TensorFlow's BatchMatMulV2: batch dims
 * broadcast numpy-style, adj_x / adj_y transpose the last two dims): its
 * registration, shape function (ops/linalg_shapes.h), gradient and public
 * builder. */
#include "ops/linalg_shapes.h"
#include "ops/math_ops.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static rf_status *batch_matmul_shape(rf__shape_ctx *c) {
  bool ax, ay;
  RF_CHECK(rf__attrs_get_bool(&c->node->attrs, "adj_x", &ax));
  RF_CHECK(rf__attrs_get_bool(&c->node->attrs, "adj_y", &ay));
  return rf__batch_matmul_shape(&c->input_shapes[0], &c->input_shapes[1], ax,
                                ay, &c->output_shapes[0]);
}

/* TensorFlow's _BatchMatMulV2 gradient: each product below gives the
 * gradient over the output's batch dims, then summed down to the input's
 * (broadcast batch dims). g = dy. */
static rf_status *batch_matmul_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_dtype t;
  RF_CHECK(rf__attrs_get_type(&c->op->attrs, "T", &t));
  if (!rf_dtype_is_float(t)) return NULL; /* integers carry no gradient */
  bool ax, ay;
  RF_CHECK(rf__attrs_get_bool(&c->op->attrs, "adj_x", &ax));
  RF_CHECK(rf__attrs_get_bool(&c->op->attrs, "adj_y", &ay));
  rf_graph *g = c->g;
  rf_output x = rf__input(c->op, 0), y = rf__input(c->op, 1), d = c->dy[0];
  rf_output dx, dy;
  if (!ax && !ay) {
    dx = rf_batch_matmul(g, NULL, d, y, false, true);
    dy = rf_batch_matmul(g, NULL, x, d, true, false);
  } else if (!ax && ay) {
    dx = rf_batch_matmul(g, NULL, d, y, false, false);
    dy = rf_batch_matmul(g, NULL, d, x, true, false);
  } else if (ax && !ay) {
    dx = rf_batch_matmul(g, NULL, y, d, false, true);
    dy = rf_batch_matmul(g, NULL, x, d, false, false);
  } else {
    dx = rf_batch_matmul(g, NULL, y, d, true, true);
    dy = rf_batch_matmul(g, NULL, d, x, true, true);
  }
  c->dx[0] = rf__sum_to_shape_of(g, NULL, dx, x);
  c->dx[1] = rf__sum_to_shape_of(g, NULL, dy, y);
  return NULL;
}

static const rf__op_spec batch_matmul = {
    .name = "BatchMatMul",
    .inputs = "x: T, y: T",
    .outputs = "output: T",
    .attrs =
        "T: type in {@float, int32, int64}; adj_x: bool = false; "
        "adj_y: bool = false",
    .shape = batch_matmul_shape,
    .grad = batch_matmul_grad};

rf_status *rf__register_linalg_ops(void) {
  return rf__op_register(&batch_matmul);
}

rf_output rf_batch_matmul(rf_graph *g, const char *name, rf_output x,
                          rf_output y, bool adj_x, bool adj_y) {
  rf_output in[2] = {x, y};
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "BatchMatMul", name, in, 2))
    return (rf_output){NULL, 0};
  rf_node_builder *b = rf_node_builder_new(g, "BatchMatMul", name);
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, y);
  rf_node_builder_attr_bool(b, "adj_x", adj_x);
  rf_node_builder_attr_bool(b, "adj_y", adj_y);
  return rf__finish_output(g, b);
}
