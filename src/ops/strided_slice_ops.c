/* ops/strided_slice_ops.c - StridedSlice (TensorFlow's tf.strided_slice
 * without ellipsis and new axes; canonical arguments in
 * ops/strided_slice_spec.h) and its gradient _StridedSliceGrad(dy, like):
 * dy scattered into zeros of like's shape at the elements the slice took.
 * Each is the other's gradient. Indices are attrs, so shapes are inferred at
 * build time where the input's are known; the kernels are the shape ops'
 * copy plans (kernels/shape_prepare.c). */
#include <string.h>

#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ops/strided_slice_spec.h"
#include "ringflow/ops.h"

static const rf_output invalid_output = {NULL, 0};

static rf_status *strided_slice_shape(rf__shape_ctx *c) {
  rf__strided_slice_args a;
  RF_CHECK(rf__strided_slice_args_get(&c->node->attrs, &a));
  return rf__strided_slice_spec(&a, &c->input_shapes[0], NULL, NULL, NULL,
                                &c->output_shapes[0]);
}

/* _StridedSliceGrad(dy, like): like's shape; the slice of it must be dy's
 * where both are known. */
static rf_status *strided_slice_grad_shape(rf__shape_ctx *c) {
  rf__strided_slice_args a;
  rf_shape sliced;
  const rf_shape *dy = &c->input_shapes[0], *like = &c->input_shapes[1];
  RF_CHECK(rf__strided_slice_args_get(&c->node->attrs, &a));
  RF_CHECK(rf__strided_slice_spec(&a, like, NULL, NULL, NULL, &sliced));
  bool differ = sliced.rank >= 0 && dy->rank >= 0 && sliced.rank != dy->rank;
  for (int i = 0; !differ && sliced.rank >= 0 && i < dy->rank; i++)
    differ = sliced.dims[i] >= 0 && dy->dims[i] >= 0 &&
             sliced.dims[i] != dy->dims[i];
  if (differ) {
    char a1[128], a2[128];
    rf_shape_format(dy, a1, sizeof a1);
    rf_shape_format(&sliced, a2, sizeof a2);
    return rf__invalid("dy has shape %s but the slice has shape %s", a1, a2);
  }
  c->output_shapes[0] = *like;
  return NULL;
}

/* A node of op on inputs in[0, n) with the attrs of `from`'s args. */
static rf_output with_args(rf_graph *g, const char *op, const char *name,
                           const rf_output *in, int n,
                           const rf__strided_slice_args *a) {
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_int_list(b, "begin", a->begin, a->n);
  rf_node_builder_attr_int_list(b, "end", a->end, a->n);
  rf_node_builder_attr_int_list(b, "strides", a->strides, a->n);
  rf_node_builder_attr_int(b, "begin_mask", a->begin_mask);
  rf_node_builder_attr_int(b, "end_mask", a->end_mask);
  rf_node_builder_attr_int(b, "shrink_axis_mask", a->shrink_axis_mask);
  return rf__finish_output(g, b);
}

static rf_status *strided_slice_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf__strided_slice_args a;
  RF_CHECK(rf__strided_slice_args_get(&c->op->attrs, &a));
  rf_output in[2] = {c->dy[0], rf__input(c->op, 0)};
  c->dx[0] = with_args(c->g, "_StridedSliceGrad", NULL, in, 2, &a);
  return NULL;
}

/* The gradient of a scatter is the slice of the gradient; like gets none. */
static rf_status *strided_slice_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf__strided_slice_args a;
  RF_CHECK(rf__strided_slice_args_get(&c->op->attrs, &a));
  c->dx[0] = with_args(c->g, "StridedSlice", NULL, &c->dy[0], 1, &a);
  return NULL;
}

#define STRIDED_SLICE_ATTRS                                      \
  "T: type in {@all}; begin: list(int); end: list(int); "        \
  "strides: list(int); begin_mask: int = 0; end_mask: int = 0; " \
  "shrink_axis_mask: int = 0"

static const rf__op_spec strided_slice_ops[] = {
    {.name = "StridedSlice",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = STRIDED_SLICE_ATTRS,
     .shape = strided_slice_shape,
     .grad = strided_slice_grad},
    {.name = "_StridedSliceGrad",
     .inputs = "dy: T, like: T",
     .outputs = "dx: T",
     .attrs = STRIDED_SLICE_ATTRS,
     .shape = strided_slice_grad_shape,
     .grad = strided_slice_grad_grad},
};

rf_status *rf__register_strided_slice_ops(void) {
  for (size_t i = 0; i < sizeof strided_slice_ops / sizeof *strided_slice_ops;
       i++)
    RF_CHECK(rf__op_register(&strided_slice_ops[i]));
  return NULL;
}

rf_output rf_strided_slice(rf_graph *g, const char *name, rf_output x,
                           const int64_t *begin, const int64_t *end,
                           const int64_t *strides, int n, int64_t begin_mask,
                           int64_t end_mask, int64_t shrink_axis_mask) {
  if (rf__graph_failed(g) ||
      !rf__graph_inputs_ok(g, "StridedSlice", name, &x, 1))
    return invalid_output;
  if (n < 0 || n > RF_MAX_RANK || (n > 0 && (!begin || !end))) {
    rf__graph_refuse(g, "StridedSlice", name,
                     "begin and end must hold n entries each (0 <= n <= "
                     "%d), got n = %d",
                     RF_MAX_RANK, n);
    return invalid_output;
  }
  int64_t ones[RF_MAX_RANK];
  for (int i = 0; i < n; i++) ones[i] = 1;
  rf__strided_slice_args a = {begin,      end,      strides ? strides : ones, n,
                              begin_mask, end_mask, shrink_axis_mask};
  return with_args(g, "StridedSlice", name, &x, 1, &a);
}
