/* ops/math_ops.c - the math op family: Add, Sub, Mul, Div, Neg, AddN, MatMul,
 * Cast, Equal and the internal _SumToShapeOf and _BroadcastToShapeOf; their
 * shape functions and the public op functions of ringflow/ops.h. Gradients live
 * in math_grad.c. Binary ops broadcast numpy-style (ops/broadcast_shape.h). */
#include "ops/math_ops.h"

#include "ops/broadcast_shape.h"
#include "ops/op_families.h"
#include "ringflow/ops.h"

/* ---- shape functions ---- */

static rf_status *broadcast_shape_fn(rf__shape_ctx *c) {
  const rf_shape *a = &c->input_shapes[0], *b = &c->input_shapes[1];
  if (!rf__broadcast_shape(a, b, &c->output_shapes[0]))
    return rf__broadcast_error(a, b);
  return NULL;
}

static rf_status *same_shape_fn(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* Merges two shapes that must be equal: unknown parts take the other's. */
static bool merge_shapes(const rf_shape *a, const rf_shape *b, rf_shape *out) {
  if (a->rank < 0) {
    *out = *b;
    return true;
  }
  if (b->rank < 0) {
    *out = *a;
    return true;
  }
  if (a->rank != b->rank) return false;
  rf_shape r = *a;
  for (int i = 0; i < a->rank; i++) {
    if (a->dims[i] < 0) {
      r.dims[i] = b->dims[i];
    } else if (b->dims[i] >= 0 && a->dims[i] != b->dims[i]) {
      return false;
    }
  }
  *out = r;
  return true;
}

static rf_status *add_n_shape_fn(rf__shape_ctx *c) {
  rf_shape s = rf_shape_unknown();
  for (int i = 0; i < c->num_inputs; i++) {
    if (!merge_shapes(&s, &c->input_shapes[i], &s)) {
      char s0[128], si[128];
      rf_shape_format(&c->input_shapes[0], s0, sizeof s0);
      rf_shape_format(&c->input_shapes[i], si, sizeof si);
      return rf__invalid(
          "AddN inputs must all have one shape: input 0 is %s, input %d is %s",
          s0, i, si);
    }
  }
  c->output_shapes[0] = s;
  return NULL;
}

static rf_status *matmul_shape_fn(rf__shape_ctx *c) {
  const rf_shape *a = &c->input_shapes[0], *b = &c->input_shapes[1];
  bool ta = false, tb = false;
  RF_CHECK(rf__attrs_get_bool(&c->node->attrs, "transpose_a", &ta));
  RF_CHECK(rf__attrs_get_bool(&c->node->attrs, "transpose_b", &tb));
  char sa[128], sb[128];
  rf_shape_format(a, sa, sizeof sa);
  rf_shape_format(b, sb, sizeof sb);
  if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
    return rf__invalid("MatMul needs rank-2 inputs, got a %s and b %s", sa, sb);
  int64_t m = a->rank < 0 ? -1 : a->dims[ta ? 1 : 0];
  int64_t ka = a->rank < 0 ? -1 : a->dims[ta ? 0 : 1];
  int64_t kb = b->rank < 0 ? -1 : b->dims[tb ? 1 : 0];
  int64_t n = b->rank < 0 ? -1 : b->dims[tb ? 0 : 1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return rf__invalid(
        "Matrix size-incompatible: a %s%s and b %s%s have inner dimensions "
        "%lld and %lld",
        sa, ta ? " transposed" : "", sb, tb ? " transposed" : "", (long long)ka,
        (long long)kb);
  c->output_shapes[0] = rf_shape_of(2, m, n);
  return NULL;
}

/* _FusedMatMulBias(Relu)(a, b, bias): MatMul's product, bias over its
 * columns (BiasAdd's check). */
static rf_status *fused_matmul_shape_fn(rf__shape_ctx *c) {
  RF_CHECK(matmul_shape_fn(c));
  const rf_shape *bias = &c->input_shapes[2];
  int64_t n = c->output_shapes[0].dims[1];
  if (bias->rank >= 0 &&
      (bias->rank != 1 || (n >= 0 && bias->dims[0] >= 0 && bias->dims[0] != n)))
    return rf__invalid(
        "bias of rank %d does not match a product of %lld "
        "columns",
        bias->rank, (long long)n);
  return NULL;
}

/* _FusedMatMulBiasGrad(a, b): the product, and the bias gradient of the
 * input bias_input reduced over k (b (k, n): n; a transposed (k, m): m). */
static rf_status *fused_matmul_bias_grad_shape_fn(rf__shape_ctx *c) {
  RF_CHECK(matmul_shape_fn(c));
  int64_t which = 1;
  RF_CHECK(rf__attrs_get_int(&c->node->attrs, "bias_input", &which));
  c->output_shapes[1] = rf_shape_of(1, c->output_shapes[0].dims[which ? 1 : 0]);
  return NULL;
}

/* `like` must broadcast to x: right-aligned, each of its dims 1 or x's. */
static rf_status *sum_to_shape_of_shape_fn(rf__shape_ctx *c) {
  const rf_shape *x = &c->input_shapes[0], *like = &c->input_shapes[1];
  rf_shape b;
  bool ok = rf__broadcast_shape(x, like, &b);
  if (ok && x->rank >= 0 && like->rank > x->rank) ok = false;
  if (ok && x->rank >= 0 && b.rank >= 0) {
    for (int i = 0; i < x->rank; i++)
      if (x->dims[i] >= 0 && b.dims[i] >= 0 && x->dims[i] != b.dims[i])
        ok = false;
  }
  if (!ok) {
    char sx[128], sl[128];
    rf_shape_format(x, sx, sizeof sx);
    rf_shape_format(like, sl, sizeof sl);
    return rf__invalid("_SumToShapeOf: cannot sum shape %s down to shape %s",
                       sx, sl);
  }
  c->output_shapes[0] = *like;
  return NULL;
}

/* x must broadcast to `like`: the broadcast of the two is like's shape. */
static rf_status *broadcast_to_shape_of_shape_fn(rf__shape_ctx *c) {
  const rf_shape *x = &c->input_shapes[0], *like = &c->input_shapes[1];
  rf_shape b;
  bool ok = rf__broadcast_shape(x, like, &b);
  if (ok && like->rank >= 0 && x->rank > like->rank) ok = false;
  if (ok && like->rank >= 0 && b.rank >= 0) {
    for (int i = 0; i < like->rank; i++)
      if (like->dims[i] >= 0 && b.dims[i] >= 0 && like->dims[i] != b.dims[i])
        ok = false;
  }
  if (!ok) {
    char sx[128], sl[128];
    rf_shape_format(x, sx, sizeof sx);
    rf_shape_format(like, sl, sizeof sl);
    return rf__invalid(
        "_BroadcastToShapeOf: cannot broadcast shape %s to shape %s", sx, sl);
  }
  c->output_shapes[0] = *like;
  return NULL;
}

/* ---- registrations ---- */

#define BINARY_SPEC(op, grad_fn)                                   \
  {                                                                \
    .name = op, .inputs = "x: T, y: T", .outputs = "z: T",         \
    .attrs = "T: type in {@numeric}", .shape = broadcast_shape_fn, \
    .grad = grad_fn                                                \
  }

#define FUSED_MATMUL_ATTRS                                 \
  "T: type in {float16, bfloat16, float32}; transpose_a: " \
  "bool = false; transpose_b: bool = false"

static const rf__op_spec math_specs[] = {
    BINARY_SPEC("Add", rf__add_grad),
    BINARY_SPEC("Sub", rf__sub_grad),
    BINARY_SPEC("Mul", rf__mul_grad),
    BINARY_SPEC("Div", rf__div_grad),
    {.name = "Neg",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type in {float16, bfloat16, float32, float64, int8, int32, "
              "int64}",
     .shape = same_shape_fn,
     .grad = rf__neg_grad},
    {.name = "AddN",
     .inputs = "inputs: N * T",
     .outputs = "sum: T",
     .attrs = "N: int >= 1; T: type in {@numeric}",
     .shape = add_n_shape_fn,
     .grad = rf__add_n_grad},
    {.name = "MatMul",
     .inputs = "a: T, b: T",
     .outputs = "product: T",
     .attrs = "T: type in {@float, int32, int64}; transpose_a: bool = false; "
              "transpose_b: bool = false",
     .shape = matmul_shape_fn,
     .grad = rf__matmul_grad},
    /* A MatMul with its epilogue as one node (passes/fuse_epilogues.c):
     * one cuBLASLt product on GPU devices. */
    {.name = "_FusedMatMulBias",
     .inputs = "a: T, b: T, bias: T",
     .outputs = "product: T",
     .attrs = FUSED_MATMUL_ATTRS,
     .shape = fused_matmul_shape_fn,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "_FusedMatMulBiasRelu",
     .inputs = "a: T, b: T, bias: T",
     .outputs = "activations: T",
     .attrs = FUSED_MATMUL_ATTRS,
     .shape = fused_matmul_shape_fn,
     .flags = RF_OP_NO_GRADIENT},
    /* bias_input 1: output 1 is _BiasAddGrad(b) (b not transposed);
     * 0: _BiasAddGrad(a) (a transposed). */
    {.name = "_FusedMatMulBiasGrad",
     .inputs = "a: T, b: T",
     .outputs = "product: T, bias_grad: T",
     .attrs = FUSED_MATMUL_ATTRS "; bias_input: int >= 0 = 1",
     .shape = fused_matmul_bias_grad_shape_fn,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "Cast",
     .inputs = "x: SrcT",
     .outputs = "y: DstT",
     .attrs = "SrcT: type in {@all}; DstT: type in {@all}",
     .shape = same_shape_fn,
     .grad = rf__cast_grad},
    {.name = "Equal",
     .inputs = "x: T, y: T",
     .outputs = "z: bool",
     .attrs = "T: type in {@all}",
     .shape = broadcast_shape_fn,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "_SumToShapeOf",
     .inputs = "x: T, like: U",
     .outputs = "y: T",
     .attrs = "T: type in {@numeric}; U: type in {@all}",
     .shape = sum_to_shape_of_shape_fn,
     .grad = rf__sum_to_shape_of_grad},
    {.name = "_BroadcastToShapeOf",
     .inputs = "x: T, like: U",
     .outputs = "y: T",
     .attrs = "T: type in {@all}; U: type in {@all}",
     .shape = broadcast_to_shape_of_shape_fn,
     .grad = rf__broadcast_to_shape_of_grad},
};

rf_status *rf__register_math_ops(void) {
  for (size_t i = 0; i < sizeof math_specs / sizeof math_specs[0]; i++)
    RF_CHECK(rf__op_register(&math_specs[i]));
  return NULL;
}

/* ---- op functions ---- */

static const rf_output invalid_output = {NULL, 0};

/* A node of `op` over inputs that share type attr T (set from the first, so
 * the builder reports a second input of another dtype). */
static rf_output build_typed(rf_graph *g, const char *op, const char *name,
                             const rf_output *in, int n) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, in, n))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(in[0]));
  return rf__finish_output(g, b);
}

static rf_output binary(rf_graph *g, const char *op, const char *name,
                        rf_output a, rf_output b) {
  rf_output in[2] = {a, b};
  return build_typed(g, op, name, in, 2);
}

rf_output rf_add(rf_graph *g, const char *name, rf_output a, rf_output b) {
  return binary(g, "Add", name, a, b);
}

rf_output rf_sub(rf_graph *g, const char *name, rf_output a, rf_output b) {
  return binary(g, "Sub", name, a, b);
}

rf_output rf_mul(rf_graph *g, const char *name, rf_output a, rf_output b) {
  return binary(g, "Mul", name, a, b);
}

rf_output rf_div(rf_graph *g, const char *name, rf_output a, rf_output b) {
  return binary(g, "Div", name, a, b);
}

rf_output rf_equal(rf_graph *g, const char *name, rf_output a, rf_output b) {
  return binary(g, "Equal", name, a, b);
}

rf_output rf_neg(rf_graph *g, const char *name, rf_output x) {
  return build_typed(g, "Neg", name, &x, 1);
}

rf_output rf_add_n(rf_graph *g, const char *name, const rf_output *xs, int n) {
  if (rf__graph_failed(g)) return invalid_output;
  if (!xs || n < 1) {
    rf__graph_refuse(g, "AddN", name, "needs at least one input, got %d",
                     xs ? n : 0);
    return invalid_output;
  }
  if (!rf__graph_inputs_ok(g, "AddN", name, xs, n)) return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "AddN", name);
  rf_node_builder_input_list(b, xs, n);
  rf_node_builder_attr_int(b, "N", n);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(xs[0]));
  return rf__finish_output(g, b);
}

rf_output rf_matmul(rf_graph *g, const char *name, rf_output a, rf_output b,
                    bool transpose_a, bool transpose_b) {
  rf_output in[2] = {a, b};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "MatMul", name, in, 2))
    return invalid_output;
  rf_node_builder *nb = rf_node_builder_new(g, "MatMul", name);
  rf_node_builder_input(nb, a);
  rf_node_builder_input(nb, b);
  rf_node_builder_attr_dtype(nb, "T", rf_output_dtype(a));
  rf_node_builder_attr_bool(nb, "transpose_a", transpose_a);
  rf_node_builder_attr_bool(nb, "transpose_b", transpose_b);
  return rf__finish_output(g, nb);
}

rf_output rf_cast(rf_graph *g, const char *name, rf_output x, rf_dtype to) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "Cast", name, &x, 1))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, "Cast", name);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_dtype(b, "SrcT", rf_output_dtype(x));
  rf_node_builder_attr_dtype(b, "DstT", to);
  return rf__finish_output(g, b);
}

/* An internal op of inputs (x, like) with type attrs T and U. */
static rf_output shape_of_op(rf_graph *g, const char *op, const char *name,
                             rf_output x, rf_output like) {
  rf_output in[2] = {x, like};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, in, 2))
    return invalid_output;
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, like);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(x));
  rf_node_builder_attr_dtype(b, "U", rf_output_dtype(like));
  return rf__finish_output(g, b);
}

rf_output rf__sum_to_shape_of(rf_graph *g, const char *name, rf_output x,
                              rf_output like) {
  return shape_of_op(g, "_SumToShapeOf", name, x, like);
}

rf_output rf__broadcast_to_shape_of(rf_graph *g, const char *name, rf_output x,
                                    rf_output like) {
  return shape_of_op(g, "_BroadcastToShapeOf", name, x, like);
}
