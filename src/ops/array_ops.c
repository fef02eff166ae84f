/* ops/array_ops.c - sources and plumbing: Const, Placeholder, Identity, NoOp,
 * Reshape, Shape, Fill, ZerosLike, OnesLike. Their registrations (signature,
 * shape function, gradient) and the public builders of ringflow/ops.h. Shape
 * functions read constant inputs (Reshape's shape, Fill's dims) when they come
 * from a Const, so static shapes stay known through reshapes. */
#include "ops/array_shapes.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static const rf_output invalid_output = {NULL, 0};

/* ---- shape functions ---- */

static rf_status *const_shape(rf__shape_ctx *c) {
  rf_tensor *value;
  rf_dtype dtype;
  RF_CHECK(rf__attrs_get_tensor(&c->node->attrs, "value", &value));
  RF_CHECK(rf__attrs_get_type(&c->node->attrs, "dtype", &dtype));
  if (!value) return rf__invalid("attr value holds no tensor");
  if (rf_tensor_dtype(value) != dtype)
    return rf__invalid("attr value is a %s tensor but attr dtype is %s",
                       rf_dtype_name(rf_tensor_dtype(value)),
                       rf_dtype_name(dtype));
  c->output_shapes[0] = rf_tensor_shape(value);
  return NULL;
}

static rf_status *placeholder_shape(rf__shape_ctx *c) {
  return rf__attrs_get_shape(&c->node->attrs, "shape", &c->output_shapes[0]);
}

/* Identity, ZerosLike, OnesLike. */
static rf_status *same_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* Checks that a known rank is `rank`; `what` names the input. */
static rf_status *check_rank(const rf_shape *s, int rank, const char *what,
                             const char *kind) {
  if (s->rank < 0 || s->rank == rank) return NULL;
  char buf[128];
  rf_shape_format(s, buf, sizeof buf);
  return rf__invalid("%s must be a %s, got shape %s", what, kind, buf);
}

/* Output shape from a vector input (index k) whose value is not known: its
 * length, when known, is the output's rank. */
static void rank_from_vector(const rf_shape *vec, rf_shape *out) {
  if (vec->rank == 1 && vec->dims[0] >= 0 && vec->dims[0] <= RF_MAX_RANK) {
    int64_t dims[RF_MAX_RANK];
    for (int i = 0; i < (int)vec->dims[0]; i++) dims[i] = RF_UNKNOWN_DIM;
    *out = rf_shape_make((int)vec->dims[0], dims);
  }
}

static rf_status *reshape_shape(rf__shape_ctx *c) {
  const rf_shape *in = &c->input_shapes[0], *sh = &c->input_shapes[1];
  RF_CHECK(check_rank(sh, 1, "shape", "vector"));
  rf_tensor *value = c->input_values ? c->input_values[1] : NULL;
  if (!value) {
    rank_from_vector(sh, &c->output_shapes[0]);
    return NULL;
  }
  int64_t dims[RF_MAX_RANK];
  int rank;
  RF_CHECK(rf__dims_from_tensor(value, "shape", dims, &rank));
  return rf__reshape_output_shape(rf_shape_num_elements(in), dims, rank,
                                  &c->output_shapes[0]);
}

static rf_status *shape_shape(rf__shape_ctx *c) {
  int rank = c->input_shapes[0].rank;
  c->output_shapes[0] = rf_shape_of(1, (int64_t)(rank < 0 ? -1 : rank));
  return NULL;
}

static rf_status *fill_shape(rf__shape_ctx *c) {
  RF_CHECK(check_rank(&c->input_shapes[0], 1, "dims", "vector"));
  RF_CHECK(check_rank(&c->input_shapes[1], 0, "value", "scalar"));
  rf_tensor *value = c->input_values ? c->input_values[0] : NULL;
  if (!value) {
    rank_from_vector(&c->input_shapes[0], &c->output_shapes[0]);
    return NULL;
  }
  int64_t dims[RF_MAX_RANK];
  int rank;
  RF_CHECK(rf__dims_from_tensor(value, "dims", dims, &rank));
  return rf__fill_output_shape(dims, rank, &c->output_shapes[0]);
}

/* ---- gradients ---- */

static rf_status *identity_grad(rf__grad_ctx *c) {
  c->dx[0] = c->dy[0];
  return NULL;
}

/* dx = Reshape(dy, Shape(x)); the shape input gets no gradient. */
static rf_status *reshape_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output x = rf__input(c->op, 0);
  rf_output shape = rf_shape_of_op(c->g, NULL, x, RF_INT64);
  c->dx[0] = rf_reshape(c->g, NULL, c->dy[0], shape);
  return NULL;
}

/* Every output element is the value: its gradient is the sum of dy. The
 * dims input gets none. */
static rf_status *fill_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[1] = rf_sum(c->g, NULL, c->dy[0], NULL, -1, false);
  return NULL;
}

/* ---- registration ---- */

static const rf__op_spec array_ops[] = {
    {.name = "Const",
     .outputs = "output: dtype",
     .attrs = "value: tensor; dtype: type in {@all}",
     .shape = const_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "Placeholder",
     .outputs = "output: dtype",
     .attrs = "dtype: type in {@all}; shape: shape",
     .shape = placeholder_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "Identity",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = "T: type in {@all}",
     .shape = same_shape,
     .grad = identity_grad},
    {.name = "NoOp", .flags = RF_OP_NO_GRADIENT},
    {.name = "Reshape",
     .inputs = "tensor: T, shape: Tshape",
     .outputs = "output: T",
     .attrs = "T: type in {@all}; Tshape: type in {int32, int64} = int32",
     .shape = reshape_shape,
     .grad = reshape_grad},
    {.name = "Shape",
     .inputs = "input: T",
     .outputs = "output: out_type",
     .attrs = "T: type in {@all}; out_type: type in {int32, int64} = int32",
     .shape = shape_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "Fill",
     .inputs = "dims: index_type, value: T",
     .outputs = "output: T",
     .attrs = "T: type in {@all}; index_type: type in {int32, int64} = int32",
     .shape = fill_shape,
     .grad = fill_grad},
    {.name = "ZerosLike",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type in {@all}",
     .shape = same_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "OnesLike",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type in {@all}",
     .shape = same_shape,
     .flags = RF_OP_NO_GRADIENT},
};

rf_status *rf__register_array_ops(void) {
  for (size_t i = 0; i < sizeof array_ops / sizeof array_ops[0]; i++)
    RF_CHECK(rf__op_register(&array_ops[i]));
  return NULL;
}

/* ---- public builders ---- */

/* A builder for a one-input op, or NULL when g failed or x is invalid. */
static rf_node_builder *unary(rf_graph *g, const char *op, const char *name,
                              rf_output x) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, &x, 1))
    return NULL;
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  rf_node_builder_input(b, x);
  return b;
}

rf_output rf_const(rf_graph *g, const char *name, rf_tensor *value) {
  if (rf__graph_failed(g)) return invalid_output;
  if (!value) {
    rf__graph_refuse(g, "Const", name, "NULL value tensor");
    return invalid_output;
  }
  rf_node_builder *b = rf_node_builder_new(g, "Const", name);
  rf_node_builder_attr_tensor(b, "value", value);
  rf_node_builder_attr_dtype(b, "dtype", rf_tensor_dtype(value));
  return rf__finish_output(g, b);
}

rf_output rf_const_scalar(rf_graph *g, const char *name, rf_dtype dtype,
                          double value) {
  if (rf__graph_failed(g)) return invalid_output;
  rf_tensor *t;
  rf_status *st = rf_tensor_new_scalar(dtype, value, &t);
  if (st) {
    rf__graph_refuse_status(g, "Const", name, st);
    return invalid_output;
  }
  rf_output out = rf_const(g, name, t);
  rf_tensor_release(t); /* the node holds its own reference */
  return out;
}

rf_output rf_placeholder(rf_graph *g, const char *name, rf_dtype dtype,
                         rf_shape shape) {
  if (rf__graph_failed(g)) return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Placeholder", name);
  rf_node_builder_attr_dtype(b, "dtype", dtype);
  rf_node_builder_attr_shape(b, "shape", shape);
  return rf__finish_output(g, b);
}

rf_output rf_identity(rf_graph *g, const char *name, rf_output x) {
  rf_node_builder *b = unary(g, "Identity", name, x);
  return b ? rf__finish_output(g, b) : invalid_output;
}

rf_node *rf_noop(rf_graph *g, const char *name) {
  if (rf__graph_failed(g)) return NULL;
  return rf__finish_node(g, rf_node_builder_new(g, "NoOp", name));
}

rf_output rf_reshape(rf_graph *g, const char *name, rf_output x,
                     rf_output shape) {
  rf_output in[2] = {x, shape};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Reshape", name, in, 2))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Reshape", name);
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, shape);
  return rf__finish_output(g, b);
}

rf_output rf_reshape_to(rf_graph *g, const char *name, rf_output x, int rank,
                        const int64_t *dims) {
  if (rf__graph_failed(g)) return invalid_output;
  if (rank < 0 || rank > RF_MAX_RANK || (rank > 0 && !dims)) {
    rf__graph_refuse(g, "Reshape", name,
                     "rank %d must be in 0..%d with dims given", rank,
                     RF_MAX_RANK);
    return invalid_output;
  }
  rf_shape vec = rf_shape_of(1, (int64_t)rank);
  /* int32 when every dim fits (as TensorFlow makes a Python list): a small
   * int32 shape moves to host memory by itself in GPU graphs. */
  bool fits = true;
  int32_t dims32[RF_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    fits = fits && dims[i] >= INT32_MIN && dims[i] <= INT32_MAX;
    dims32[i] = fits ? (int32_t)dims[i] : 0;
  }
  rf_tensor *t;
  rf_status *st = fits ? rf_tensor_new_copy(RF_INT32, &vec, dims32, &t)
                       : rf_tensor_new_copy(RF_INT64, &vec, dims, &t);
  if (st) {
    rf__graph_refuse_status(g, "Reshape", name, st);
    return invalid_output;
  }
  rf_output shape = rf_const(g, NULL, t);
  rf_tensor_release(t);
  rf_output out = rf_reshape(g, name, x, shape);
  /* a refused Reshape leaves no orphan shape Const behind */
  if (!out.node && shape.node) rf__graph_remove_node(g, shape.node);
  return out;
}

rf_output rf_shape_of_op(rf_graph *g, const char *name, rf_output x,
                         rf_dtype out_type) {
  rf_node_builder *b = unary(g, "Shape", name, x);
  if (!b) return invalid_output;
  rf_node_builder_attr_dtype(b, "out_type", out_type);
  return rf__finish_output(g, b);
}

rf_output rf_fill(rf_graph *g, const char *name, rf_output dims,
                  rf_output value) {
  rf_output in[2] = {dims, value};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Fill", name, in, 2))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Fill", name);
  rf_node_builder_input(b, dims);
  rf_node_builder_input(b, value);
  return rf__finish_output(g, b);
}

rf_output rf_zeros_like(rf_graph *g, const char *name, rf_output x) {
  rf_node_builder *b = unary(g, "ZerosLike", name, x);
  return b ? rf__finish_output(g, b) : invalid_output;
}

rf_output rf_ones_like(rf_graph *g, const char *name, rf_output x) {
  rf_node_builder *b = unary(g, "OnesLike", name, x);
  return b ? rf__finish_output(g, b) : invalid_output;
}
