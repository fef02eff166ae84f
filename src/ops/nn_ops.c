/* ops/nn_ops.c - neural-network ops: BiasAdd, Relu, Sigmoid, Tanh, Softmax,
 * SparseSoftmaxCrossEntropyWithLogits, their internal gradient ops (_ReluGrad,
 * _SigmoidGrad, _TanhGrad, _SoftmaxGrad, _BiasAddGrad, _SparseXentGrad), the
 * fused cross-entropy with its gradient (_SparseXentWithGrad), shape
 * functions, gradients and the public builders. Shape checks here run only on
 * what is known at build time; the kernels repeat them on the real shapes. */
#include "core/status.h"
#include "graph/graph.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static const rf_output no_output = {NULL, 0};

/* ---- shape helpers ---- */

static void fmt(const rf_shape *s, char *buf, size_t len) {
  rf_shape_format(s, buf, len);
}

/* The most specific shape compatible with both a and b; INVALID_ARGUMENT
 * naming the two arguments when they conflict. */
static rf_status *merge(const rf_shape *a, const char *an, const rf_shape *b,
                        const char *bn, rf_shape *out) {
  if (a->rank < 0 || b->rank < 0) {
    *out = a->rank < 0 ? *b : *a;
    return NULL;
  }
  bool ok = a->rank == b->rank;
  rf_shape m = *a;
  for (int i = 0; ok && i < a->rank; i++) {
    if (a->dims[i] < 0)
      m.dims[i] = b->dims[i];
    else if (b->dims[i] >= 0 && a->dims[i] != b->dims[i])
      ok = false;
  }
  if (!ok) {
    char x[96], y[96];
    fmt(a, x, sizeof x);
    fmt(b, y, sizeof y);
    return rf__invalid("%s has shape %s but %s has shape %s", an, x, bn, y);
  }
  *out = m;
  return NULL;
}

/* INVALID_ARGUMENT unless s has unknown rank or a rank in [lo, hi]. */
static rf_status *need_rank(const rf_shape *s, const char *what, int lo,
                            int hi) {
  if (s->rank < 0 || (s->rank >= lo && s->rank <= hi)) return NULL;
  char x[96];
  fmt(s, x, sizeof x);
  if (lo == hi)
    return rf__invalid("%s must have rank %d, got shape %s", what, lo, x);
  return rf__invalid("%s must have rank >= %d, got shape %s", what, lo, x);
}

/* The last dimension of s, or RF_UNKNOWN_DIM. */
static int64_t last_dim(const rf_shape *s) {
  return s->rank > 0 ? s->dims[s->rank - 1] : RF_UNKNOWN_DIM;
}

/* ---- shape functions ---- */

static rf_status *unary_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* (a, b) of one shape -> that shape. */
static rf_status *binary_same_shape(rf__shape_ctx *c) {
  const rf__op_def *op = c->node->op;
  return merge(&c->input_shapes[0], op ? op->inputs[0].name : "input 0",
               &c->input_shapes[1], op ? op->inputs[1].name : "input 1",
               &c->output_shapes[0]);
}

static rf_status *softmax_shape(rf__shape_ctx *c) {
  RF_CHECK(need_rank(&c->input_shapes[0], "logits", 1, RF_MAX_RANK));
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

static rf_status *softmax_grad_shape(rf__shape_ctx *c) {
  RF_CHECK(need_rank(&c->input_shapes[1], "softmax", 1, RF_MAX_RANK));
  return binary_same_shape(c);
}

static rf_status *bias_add_shape(rf__shape_ctx *c) {
  const rf_shape *x = &c->input_shapes[0], *bias = &c->input_shapes[1];
  RF_CHECK(need_rank(x, "value", 1, RF_MAX_RANK));
  RF_CHECK(need_rank(bias, "bias", 1, 1));
  rf_shape out = *x;
  int64_t cx = last_dim(x), cb = last_dim(bias);
  if (cx >= 0 && cb >= 0 && cx != cb) {
    char a[96], b[96];
    fmt(x, a, sizeof a);
    fmt(bias, b, sizeof b);
    return rf__invalid(
        "bias of shape %s does not match the last dimension of value %s", b, a);
  }
  if (out.rank > 0 && cx < 0) out.dims[out.rank - 1] = cb;
  c->output_shapes[0] = out;
  return NULL;
}

static rf_status *bias_add_grad_shape(rf__shape_ctx *c) {
  const rf_shape *dy = &c->input_shapes[0];
  RF_CHECK(need_rank(dy, "out_backprop", 1, RF_MAX_RANK));
  if (dy->rank > 0)
    c->output_shapes[0] = rf_shape_of(1, last_dim(dy));
  else
    c->output_shapes[0] = rf_shape_of(1, (int64_t)RF_UNKNOWN_DIM);
  return NULL;
}

/* Checks a (b) vector against the rows of a (b, c) matrix. */
static rf_status *rows_match(const rf_shape *vec, const char *vn,
                             const rf_shape *mat, const char *mn) {
  RF_CHECK(need_rank(mat, mn, 2, 2));
  RF_CHECK(need_rank(vec, vn, 1, 1));
  if (vec->rank == 1 && mat->rank == 2 && vec->dims[0] >= 0 &&
      mat->dims[0] >= 0 && vec->dims[0] != mat->dims[0]) {
    char a[96], b[96];
    fmt(vec, a, sizeof a);
    fmt(mat, b, sizeof b);
    return rf__invalid("%s of shape %s does not match the rows of %s %s", vn, a,
                       mn, b);
  }
  return NULL;
}

/* Batch size from either input, RF_UNKNOWN_DIM if neither knows. */
static int64_t batch_of(const rf_shape *vec, const rf_shape *mat) {
  if (mat->rank == 2 && mat->dims[0] >= 0) return mat->dims[0];
  if (vec->rank == 1) return vec->dims[0];
  return RF_UNKNOWN_DIM;
}

static rf_status *xent_shape(rf__shape_ctx *c) {
  const rf_shape *logits = &c->input_shapes[0], *labels = &c->input_shapes[1];
  RF_CHECK(rows_match(labels, "labels", logits, "logits"));
  int64_t b = batch_of(labels, logits);
  int64_t classes = logits->rank == 2 ? logits->dims[1] : RF_UNKNOWN_DIM;
  c->output_shapes[0] = rf_shape_of(1, b);
  c->output_shapes[1] = rf_shape_of(2, b, classes);
  return NULL;
}

static rf_status *xent_with_grad_shape(rf__shape_ctx *c) {
  RF_CHECK(xent_shape(c));
  return rows_match(&c->input_shapes[2], "dloss", &c->input_shapes[0],
                    "logits");
}

static rf_status *xent_grad_shape(rf__shape_ctx *c) {
  const rf_shape *dloss = &c->input_shapes[0], *bp = &c->input_shapes[1];
  RF_CHECK(rows_match(dloss, "dloss", bp, "backprop"));
  int64_t classes = bp->rank == 2 ? bp->dims[1] : RF_UNKNOWN_DIM;
  c->output_shapes[0] = rf_shape_of(2, batch_of(dloss, bp), classes);
  return NULL;
}

/* ---- gradients ---- */

/* A node of the internal op `op` over (a, b); b may be invalid (unary). */
static rf_output build(rf_graph *g, const char *op, rf_output a, rf_output b) {
  if (rf__graph_failed(g)) return no_output;
  rf_node_builder *nb = rf_node_builder_new(g, op, NULL);
  rf_node_builder_input(nb, a);
  if (b.node) rf_node_builder_input(nb, b);
  rf_node_builder_attr_dtype(nb, "T", rf_output_dtype(a));
  return rf__finish_output(g, nb);
}

static rf_output out0(const rf_node *n) {
  rf_output o = {(rf_node *)n, 0};
  return o;
}

static rf_status *bias_add_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = c->dy[0];
  c->dx[1] = build(c->g, "_BiasAddGrad", c->dy[0], no_output);
  return NULL;
}

static rf_status *relu_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = build(c->g, "_ReluGrad", c->dy[0], rf__input(c->op, 0));
  return NULL;
}

static rf_status *sigmoid_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = build(c->g, "_SigmoidGrad", out0(c->op), c->dy[0]);
  return NULL;
}

static rf_status *tanh_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = build(c->g, "_TanhGrad", out0(c->op), c->dy[0]);
  return NULL;
}

static rf_status *softmax_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = build(c->g, "_SoftmaxGrad", c->dy[0], out0(c->op));
  return NULL;
}

/* d loss_i / d logits_ij is the backprop output itself, so the logits get
 * backprop * dloss[:, None]; labels are integers and get nothing. The backprop
 * output is softmax(logits) - onehot(labels), so a gradient G flowing into it
 * (second order: the gradient of a gradient) reaches the logits as the
 * softmax's, _SoftmaxGrad(G, softmax(logits)). TensorFlow refuses this case. */
static rf_status *xent_grad(rf__grad_ctx *c) {
  rf_output dloss = no_output, dbackprop = no_output;
  if (c->dy[0].node) {
    rf_output backprop = {c->op, 1};
    dloss = build(c->g, "_SparseXentGrad", c->dy[0], backprop);
  }
  if (c->dy[1].node) {
    rf_output sm = rf_softmax(c->g, NULL, rf__input(c->op, 0));
    dbackprop = build(c->g, "_SoftmaxGrad", c->dy[1], sm);
  }
  c->dx[0] = !dloss.node       ? dbackprop
             : !dbackprop.node ? dloss
                               : rf_add(c->g, NULL, dloss, dbackprop);
  return NULL;
}

/* ---- second order: gradients of the gradient ops ---- */

/* _ReluGrad(g, x) = g * (x > 0): linear in g, piecewise constant in x. */
static rf_status *relu_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = build(c->g, "_ReluGrad", c->dy[0], rf__input(c->op, 1));
  return NULL;
}

/* z = dy * y * (1 - y): dz/dy = dy (1 - 2y), dz/d dy = y (1 - y). */
static rf_status *sigmoid_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_graph *g = c->g;
  rf_output y = rf__input(c->op, 0), dy = rf__input(c->op, 1);
  rf_output gb = rf_mul(g, NULL, c->dy[0], dy);
  rf_output gby = rf_mul(g, NULL, gb, y);
  c->dx[0] = rf_sub(g, NULL, gb, rf_add(g, NULL, gby, gby));
  c->dx[1] = build(g, "_SigmoidGrad", y, c->dy[0]);
  return NULL;
}

/* z = dy * (1 - y^2): dz/dy = -2 y dy, dz/d dy = 1 - y^2. */
static rf_status *tanh_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_graph *g = c->g;
  rf_output y = rf__input(c->op, 0), dy = rf__input(c->op, 1);
  rf_output t = rf_mul(g, NULL, rf_mul(g, NULL, c->dy[0], dy), y);
  c->dx[0] = rf_neg(g, NULL, rf_add(g, NULL, t, t));
  c->dx[1] = build(g, "_TanhGrad", y, c->dy[0]);
  return NULL;
}

/* z = (gs - r) * s with r = sum(gs * s, -1, keep). For an incoming G:
 * d/d gs = (G - sum(G * s)) * s = _SoftmaxGrad(G, s), and
 * d/d s = G * (gs - r) - gs * sum(G * s). */
static rf_status *softmax_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_graph *g = c->g;
  rf_output G = c->dy[0];
  rf_output gs = rf__input(c->op, 0), s = rf__input(c->op, 1);
  const int64_t last = -1;
  rf_output r = rf_sum(g, NULL, rf_mul(g, NULL, gs, s), &last, 1, true);
  rf_output q = rf_sum(g, NULL, rf_mul(g, NULL, G, s), &last, 1, true);
  c->dx[0] = build(g, "_SoftmaxGrad", G, s);
  c->dx[1] = rf_sub(g, NULL, rf_mul(g, NULL, G, rf_sub(g, NULL, gs, r)),
                    rf_mul(g, NULL, gs, q));
  return NULL;
}

/* The bias gradient sums over every axis but the last; its transpose
 * broadcasts G back along them. */
static rf_status *bias_add_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output dy = rf__input(c->op, 0);
  c->dx[0] = rf_bias_add(c->g, NULL, rf_zeros_like(c->g, NULL, dy), c->dy[0]);
  return NULL;
}

/* z = backprop * dloss[:, None]: d/d dloss = sum(G * backprop, 1), and
 * d/d backprop = G * dloss[:, None] = _SparseXentGrad(dloss, G). */
static rf_status *xent_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_graph *g = c->g;
  rf_output dloss = rf__input(c->op, 0), backprop = rf__input(c->op, 1);
  const int64_t classes = 1;
  c->dx[0] =
      rf_sum(g, NULL, rf_mul(g, NULL, c->dy[0], backprop), &classes, 1, false);
  c->dx[1] = build(g, "_SparseXentGrad", dloss, c->dy[0]);
  return NULL;
}

/* ---- registration ---- */

#define FLOATS "T: type in {@float}"

static const rf__op_spec specs[] = {
    {.name = "BiasAdd",
     .inputs = "value: T, bias: T",
     .outputs = "output: T",
     .attrs = FLOATS,
     .shape = bias_add_shape,
     .grad = bias_add_grad},
    {.name = "Relu",
     .inputs = "features: T",
     .outputs = "activations: T",
     .attrs = "T: type in {@float, int8, int32, int64}",
     .shape = unary_shape,
     .grad = relu_grad},
    {.name = "Sigmoid",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = FLOATS,
     .shape = unary_shape,
     .grad = sigmoid_grad},
    {.name = "Tanh",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = FLOATS,
     .shape = unary_shape,
     .grad = tanh_grad},
    {.name = "Softmax",
     .inputs = "logits: T",
     .outputs = "softmax: T",
     .attrs = FLOATS,
     .shape = softmax_shape,
     .grad = softmax_grad},
    {.name = "SparseSoftmaxCrossEntropyWithLogits",
     .inputs = "features: T, labels: Tlabels",
     .outputs = "loss: T, backprop: T",
     .attrs = FLOATS "; Tlabels: type in {int32, int64} = int64",
     .shape = xent_shape,
     .grad = xent_grad},
    {.name = "_ReluGrad",
     .inputs = "gradients: T, features: T",
     .outputs = "backprops: T",
     .attrs = "T: type in {@float, int8, int32, int64}",
     .shape = binary_same_shape,
     .grad = relu_grad_grad},
    {.name = "_SigmoidGrad",
     .inputs = "y: T, dy: T",
     .outputs = "z: T",
     .attrs = FLOATS,
     .shape = binary_same_shape,
     .grad = sigmoid_grad_grad},
    {.name = "_TanhGrad",
     .inputs = "y: T, dy: T",
     .outputs = "z: T",
     .attrs = FLOATS,
     .shape = binary_same_shape,
     .grad = tanh_grad_grad},
    {.name = "_SoftmaxGrad",
     .inputs = "grad_softmax: T, softmax: T",
     .outputs = "output: T",
     .attrs = FLOATS,
     .shape = softmax_grad_shape,
     .grad = softmax_grad_grad},
    {.name = "_BiasAddGrad",
     .inputs = "out_backprop: T",
     .outputs = "output: T",
     .attrs = FLOATS,
     .shape = bias_add_grad_shape,
     .grad = bias_add_grad_grad},
    {.name = "_SparseXentGrad",
     .inputs = "dloss: T, backprop: T",
     .outputs = "output: T",
     .attrs = FLOATS,
     .shape = xent_grad_shape,
     .grad = xent_grad_grad},
    /* SparseSoftmaxCrossEntropyWithLogits with the _SparseXentGrad of its
     * backprop as one node (passes/fuse_xent_grad.c): output 1 is
     * backprop * dloss[:, None], rounded as the two ops round. */
    {.name = "_SparseXentWithGrad",
     .inputs = "features: T, labels: Tlabels, dloss: T",
     .outputs = "loss: T, grad: T",
     .attrs = FLOATS "; Tlabels: type in {int32, int64} = int64",
     .shape = xent_with_grad_shape,
     .flags = RF_OP_NO_GRADIENT},
};

rf_status *rf__register_nn_ops(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    RF_CHECK(rf__op_register(&specs[i]));
  return NULL;
}

/* ---- public builders ---- */

static rf_output unary(rf_graph *g, const char *op, const char *name,
                       rf_output x) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, &x, 1))
    return no_output;
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(x));
  return rf__finish_output(g, b);
}

rf_output rf_bias_add(rf_graph *g, const char *name, rf_output x,
                      rf_output bias) {
  rf_output in[2] = {x, bias};
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, "BiasAdd", name, in, 2))
    return no_output;
  rf_node_builder *b = rf_node_builder_new(g, "BiasAdd", name);
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, bias);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(x));
  return rf__finish_output(g, b);
}

rf_output rf_relu(rf_graph *g, const char *name, rf_output x) {
  return unary(g, "Relu", name, x);
}

rf_output rf_sigmoid(rf_graph *g, const char *name, rf_output x) {
  return unary(g, "Sigmoid", name, x);
}

rf_output rf_tanh(rf_graph *g, const char *name, rf_output x) {
  return unary(g, "Tanh", name, x);
}

rf_output rf_softmax(rf_graph *g, const char *name, rf_output x) {
  return unary(g, "Softmax", name, x);
}

rf_output rf_sparse_softmax_cross_entropy(rf_graph *g, const char *name,
                                          rf_output logits, rf_output labels) {
  rf_output in[2] = {logits, labels};
  const char *op = "SparseSoftmaxCrossEntropyWithLogits";
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, in, 2))
    return no_output;
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  rf_node_builder_input(b, logits);
  rf_node_builder_input(b, labels);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(logits));
  rf_node_builder_attr_dtype(b, "Tlabels", rf_output_dtype(labels));
  return rf__finish_output(g, b);
}
