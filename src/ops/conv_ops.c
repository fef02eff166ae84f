/* ops/conv_ops.c - convolution and pooling ops in NHWC, as TensorFlow
 * defines them: Conv2D with Conv2DBackpropInput and Conv2DBackpropFilter,
 * MaxPool with MaxPoolGrad, AvgPool with AvgPoolGrad; shape functions,
 * gradients (the backprop ops are differentiable too, so gradients of
 * gradients work through a convolution) and the public builders. Filters are
 * (kh, kw, in_channels, out_channels), or (out_channels, kh, kw,
 * in_channels) with filter_format OHWI. The window geometry is
 * ops/conv_geometry.h, shared with the kernels. */
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "ops/conv_geometry.h"
#include "ops/op_families.h"
#include "ops/op_registry.h"
#include "ringflow/ops.h"

static const rf_output no_output = {NULL, 0};

/* ---- shape helpers ---- */

static rf_status *need_rank4(const rf_shape *s, const char *what) {
  if (s->rank < 0 || s->rank == 4) return NULL;
  char x[96];
  rf_shape_format(s, x, sizeof x);
  /* the filter is HWIO or OHWI (filter_format); the rest NHWC */
  return rf__invalid("%s must have rank 4 (%s), got shape %s", what,
                     strcmp(what, "filter") == 0 ? "HWIO or OHWI" : "NHWC", x);
}

static int64_t dim(const rf_shape *s, int i) {
  return s->rank == 4 ? s->dims[i] : RF_UNKNOWN_DIM;
}

/* The known one of a and b (both known: they must agree). */
static rf_status *agree(int64_t a, const char *an, int64_t b, const char *bn,
                        int64_t *out) {
  if (a >= 0 && b >= 0 && a != b)
    return rf__invalid("%s (%lld) does not match %s (%lld)", an, (long long)a,
                       bn, (long long)b);
  *out = a >= 0 ? a : b;
  return NULL;
}

/* The 4 dims held by a constant sizes input k, or NULL when not constant. */
static rf_status *const_sizes(rf__shape_ctx *c, int k, const char *what,
                              int64_t out[4], bool *known) {
  const rf_tensor *t = c->input_values ? c->input_values[k] : NULL;
  *known = false;
  if (c->input_shapes[k].rank >= 0 &&
      (c->input_shapes[k].rank != 1 ||
       (c->input_shapes[k].dims[0] >= 0 && c->input_shapes[k].dims[0] != 4)))
    return rf__invalid("%s must be a vector of 4 sizes", what);
  if (!t) return NULL;
  if (t->num_elements != 4)
    return rf__invalid("%s must be a vector of 4 sizes", what);
  for (int i = 0; i < 4; i++) {
    out[i] = t->dtype == RF_INT64 ? ((const int64_t *)t->data)[i]
                                  : ((const int32_t *)t->data)[i];
    if (out[i] < 0)
      return rf__invalid("%s[%d] is negative (%lld)", what, i,
                         (long long)out[i]);
  }
  *known = true;
  return NULL;
}

/* Output (n, oh, ow, oc) of a window over input dims in[] (some may be
 * unknown). */
static rf_status *window_out(const rf__window_attrs *wa, const int64_t in[4],
                             int64_t oc, rf_shape *out) {
  int64_t oh, ow, pad;
  RF_CHECK(rf__window_dim(in[1], wa->kh, wa->sh, wa->dh, wa->same, &oh, &pad));
  RF_CHECK(rf__window_dim(in[2], wa->kw, wa->sw, wa->dw, wa->same, &ow, &pad));
  *out = rf_shape_of(4, in[0], oh, ow, oc);
  if (in[0] >= 0 && oh >= 0 && ow >= 0 && oc >= 0) {
    rf__conv_geom g;
    RF_CHECK(rf__conv_geom_make(wa, in, oc, &g));
  }
  return NULL;
}

/* The run-time check of an out_backprop or grad (`what`, shape dy) against
 * the output the window gives over input dims in[] with oc channels, made
 * at build time on the dims known on both sides. */
static rf_status *window_matches(const rf__window_attrs *wa,
                                 const int64_t in[4], int64_t oc,
                                 const rf_shape *dy, const char *what) {
  if (dy->rank != 4 || wa->kh < 1 || wa->kw < 1) return NULL;
  int64_t oh, ow, pad;
  RF_CHECK(rf__window_dim(in[1], wa->kh, wa->sh, wa->dh, wa->same, &oh, &pad));
  RF_CHECK(rf__window_dim(in[2], wa->kw, wa->sw, wa->dw, wa->same, &ow, &pad));
  rf_shape want = rf_shape_of(4, in[0], oh, ow, oc);
  for (int i = 0; i < 4; i++)
    if (want.dims[i] >= 0 && dy->dims[i] >= 0 && want.dims[i] != dy->dims[i]) {
      char got[96], gives[96];
      rf_shape_format(dy, got, sizeof got);
      rf_shape_format(&want, gives, sizeof gives);
      return rf__invalid("%s has shape %s; the window gives %s", what, got,
                         gives);
    }
  return NULL;
}

/* ---- shape functions ---- */

/* "the filter's <what> (dim k)" for the axis k of a filter layout. */
static const char *filter_dim_name(char *buf, size_t size, const char *what,
                                   int k) {
  snprintf(buf, size, "the filter's %s (dim %d)", what, k);
  return buf;
}

/* Conv2D(input (n, h, w, c), filter (kh, kw, c, oc), or (oc, kh, kw, c)
 * with filter_format OHWI) -> (n, oh, ow, oc). */
static rf_status *conv2d_shape(rf__shape_ctx *c) {
  const rf_shape *x = &c->input_shapes[0], *f = &c->input_shapes[1];
  RF_CHECK(need_rank4(x, "input"));
  RF_CHECK(need_rank4(f, "filter"));
  rf__window_attrs wa;
  RF_CHECK(rf__window_attrs_read(&c->node->attrs, false, &wa));
  rf__filter_axes ax = rf__filter_axes_of(wa.ohwi);
  char name[64];
  int64_t in[4] = {dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3)}, ch;
  RF_CHECK(agree(dim(f, ax.c),
                 filter_dim_name(name, sizeof name, "in_channels", ax.c), in[3],
                 "the input's channels (dim 3)", &ch));
  if (dim(f, ax.kh) < 0 || dim(f, ax.kw) < 0) {
    c->output_shapes[0] = rf_shape_of(4, in[0], (int64_t)RF_UNKNOWN_DIM,
                                      (int64_t)RF_UNKNOWN_DIM, dim(f, ax.oc));
    return NULL;
  }
  wa.kh = dim(f, ax.kh);
  wa.kw = dim(f, ax.kw);
  if (wa.kh < 1 || wa.kw < 1)
    return rf__invalid("the filter's window must be at least 1x1");
  in[3] = ch;
  return window_out(&wa, in, dim(f, ax.oc), &c->output_shapes[0]);
}

/* _FusedConv2DBiasRelu(input, filter, bias): Conv2D's output, the bias
 * over its channels (BiasAdd's check). */
static rf_status *fused_conv2d_shape(rf__shape_ctx *c) {
  RF_CHECK(conv2d_shape(c));
  const rf_shape *bias = &c->input_shapes[2];
  int64_t oc = dim(&c->output_shapes[0], 3);
  if (bias->rank >= 0 && (bias->rank != 1 || (oc >= 0 && bias->dims[0] >= 0 &&
                                              bias->dims[0] != oc)))
    return rf__invalid("bias of rank %d does not match %lld output channels",
                       bias->rank, (long long)oc);
  return NULL;
}

/* Conv2DBackpropInput(input_sizes, filter, out_backprop) -> input_sizes. */
static rf_status *conv2d_backprop_input_shape(rf__shape_ctx *c) {
  const rf_shape *f = &c->input_shapes[1], *dy = &c->input_shapes[2];
  RF_CHECK(need_rank4(f, "filter"));
  RF_CHECK(need_rank4(dy, "out_backprop"));
  rf__window_attrs wa;
  RF_CHECK(rf__window_attrs_read(&c->node->attrs, false, &wa));
  rf__filter_axes ax = rf__filter_axes_of(wa.ohwi);
  char name[64];
  int64_t s[4], oc;
  bool known;
  RF_CHECK(const_sizes(c, 0, "input_sizes", s, &known));
  RF_CHECK(agree(dim(f, ax.oc),
                 filter_dim_name(name, sizeof name, "out_channels", ax.oc),
                 dim(dy, 3), "out_backprop's channels (dim 3)", &oc));
  if (!known) {
    c->output_shapes[0] = rf_shape_of(4, dim(dy, 0), (int64_t)RF_UNKNOWN_DIM,
                                      (int64_t)RF_UNKNOWN_DIM, dim(f, ax.c));
    return NULL;
  }
  int64_t ch;
  RF_CHECK(agree(dim(f, ax.c),
                 filter_dim_name(name, sizeof name, "in_channels", ax.c), s[3],
                 "input_sizes[3]", &ch));
  wa.kh = dim(f, ax.kh);
  wa.kw = dim(f, ax.kw);
  RF_CHECK(window_matches(&wa, s, oc, dy, "out_backprop"));
  c->output_shapes[0] = rf_shape_of(4, s[0], s[1], s[2], s[3]);
  return NULL;
}

/* Conv2DBackpropFilter(input, filter_sizes, out_backprop) -> filter_sizes
 * (in the filter_format's order). */
static rf_status *conv2d_backprop_filter_shape(rf__shape_ctx *c) {
  const rf_shape *x = &c->input_shapes[0], *dy = &c->input_shapes[2];
  RF_CHECK(need_rank4(x, "input"));
  RF_CHECK(need_rank4(dy, "out_backprop"));
  rf__window_attrs wa;
  RF_CHECK(rf__window_attrs_read(&c->node->attrs, false, &wa));
  rf__filter_axes ax = rf__filter_axes_of(wa.ohwi);
  int64_t s[4];
  bool known;
  RF_CHECK(const_sizes(c, 1, "filter_sizes", s, &known));
  if (!known) {
    int64_t d[4];
    d[ax.kh] = d[ax.kw] = RF_UNKNOWN_DIM;
    d[ax.c] = dim(x, 3);
    d[ax.oc] = dim(dy, 3);
    c->output_shapes[0] = rf_shape_of(4, d[0], d[1], d[2], d[3]);
    return NULL;
  }
  char name[32];
  int64_t ch;
  snprintf(name, sizeof name, "filter_sizes[%d]", ax.c);
  RF_CHECK(
      agree(s[ax.c], name, dim(x, 3), "the input's channels (dim 3)", &ch));
  snprintf(name, sizeof name, "filter_sizes[%d]", ax.oc);
  RF_CHECK(agree(s[ax.oc], name, dim(dy, 3), "out_backprop's channels (dim 3)",
                 &ch));
  wa.kh = s[ax.kh];
  wa.kw = s[ax.kw];
  int64_t in[4] = {dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3)};
  RF_CHECK(window_matches(&wa, in, s[ax.oc], dy, "out_backprop"));
  c->output_shapes[0] = rf_shape_of(4, s[0], s[1], s[2], s[3]);
  return NULL;
}

/* MaxPool / AvgPool(input (n, h, w, c)) -> (n, oh, ow, c). */
static rf_status *pool_shape(rf__shape_ctx *c) {
  const rf_shape *x = &c->input_shapes[0];
  RF_CHECK(need_rank4(x, "input"));
  rf__window_attrs wa;
  RF_CHECK(rf__window_attrs_read(&c->node->attrs, true, &wa));
  int64_t in[4] = {dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3)};
  return window_out(&wa, in, in[3], &c->output_shapes[0]);
}

/* MaxPoolGrad(orig_input, orig_output, grad) -> orig_input's shape. */
static rf_status *max_pool_grad_shape(rf__shape_ctx *c) {
  for (int k = 0; k < 3; k++)
    RF_CHECK(need_rank4(&c->input_shapes[k], c->node->op->inputs[k].name));
  rf__window_attrs wa;
  RF_CHECK(rf__window_attrs_read(&c->node->attrs, true, &wa));
  const rf_shape *x = &c->input_shapes[0];
  int64_t in[4] = {dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3)};
  RF_CHECK(window_matches(&wa, in, in[3], &c->input_shapes[1],
                          c->node->op->inputs[1].name));
  RF_CHECK(window_matches(&wa, in, in[3], &c->input_shapes[2],
                          c->node->op->inputs[2].name));
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

/* AvgPoolGrad(orig_input_shape, grad) -> orig_input_shape. */
static rf_status *avg_pool_grad_shape(rf__shape_ctx *c) {
  const rf_shape *dy = &c->input_shapes[1];
  RF_CHECK(need_rank4(dy, "grad"));
  rf__window_attrs wa;
  RF_CHECK(rf__window_attrs_read(&c->node->attrs, true, &wa));
  int64_t s[4];
  bool known;
  RF_CHECK(const_sizes(c, 0, "orig_input_shape", s, &known));
  if (known) RF_CHECK(window_matches(&wa, s, s[3], dy, "grad"));
  c->output_shapes[0] =
      known ? rf_shape_of(4, s[0], s[1], s[2], s[3])
            : rf_shape_of(4, dim(dy, 0), (int64_t)RF_UNKNOWN_DIM,
                          (int64_t)RF_UNKNOWN_DIM, dim(dy, 3));
  return NULL;
}

/* ---- node building ---- */

/* The window attrs of `from` (a node of this family), copied onto b. */
static void copy_attrs(rf_node_builder *b, const rf_node *from) {
  static const char *const lists[] = {"strides", "dilations", "ksize"};
  for (int i = 0; i < 3; i++) {
    const int64_t *v;
    int n;
    if (!rf__attrs_find(&from->attrs, lists[i])) continue;
    rf_status *st = rf__attrs_get_int_list(&from->attrs, lists[i], &v, &n);
    if (st) {
      rf_status_free(st); /* the builder reports the missing attr */
      continue;
    }
    rf_node_builder_attr_int_list(b, lists[i], v, n);
  }
  static const char *const strings[] = {"padding", "data_format",
                                        "filter_format"};
  for (int i = 0; i < 3; i++) {
    const char *s;
    if (!rf__attrs_find(&from->attrs, strings[i])) continue; /* a default */
    rf_status *st = rf_node_attr_string(from, strings[i], &s);
    if (st)
      rf_status_free(st); /* the builder reports the missing attr */
    else
      rf_node_builder_attr_string(b, strings[i], s);
  }
}

/* A node of op over in[0, n), with T from `t` and the window attrs of
 * `from`. */
static rf_output build_like(rf_graph *g, const char *op, const rf_output *in,
                            int n, rf_output t, const rf_node *from) {
  if (rf__graph_failed(g)) return no_output;
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(t));
  copy_attrs(b, from);
  return rf__finish_output(g, b);
}

/* x's shape as a vector: a Const when known at build time (then the
 * consumer's shape is known too), else a Shape node. int32 (on GPU devices
 * it stays in host memory by itself), int64 where a dim is past INT32_MAX;
 * a Shape node of a shape not fully known is int64, so that any run-time
 * dim fits (an int32 one failed the run for a dim past INT32_MAX). */
static rf_output sizes_of(rf_graph *g, rf_output x) {
  rf_shape s = rf_output_shape(x);
  if (!rf_shape_is_fully_defined(&s))
    return rf_shape_of_op(g, NULL, x, RF_INT64);
  int32_t d[4] = {0};
  int64_t d64[4] = {0};
  bool wide = false;
  for (int i = 0; i < s.rank && i < 4; i++) {
    wide = wide || s.dims[i] > INT32_MAX;
    d64[i] = s.dims[i];
    d[i] = (int32_t)(s.dims[i] > INT32_MAX ? 0 : s.dims[i]);
  }
  rf_shape vec = rf_shape_of(1, (int64_t)s.rank);
  rf_tensor *t;
  rf_status *st = wide ? rf_tensor_new_copy(RF_INT64, &vec, d64, &t)
                       : rf_tensor_new_copy(RF_INT32, &vec, d, &t);
  if (st) {
    rf__graph_record(g, st);
    return no_output;
  }
  rf_output o = rf_const(g, NULL, t);
  rf_tensor_release(t);
  return o;
}

/* ---- gradients ---- */

/* y = conv(x, w): dx = BackpropInput(shape(x), w, dy),
 * dw = BackpropFilter(x, shape(w), dy). */
static rf_status *conv2d_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output x = rf__input(c->op, 0), w = rf__input(c->op, 1), dy = c->dy[0];
  rf_output a[3] = {sizes_of(c->g, x), w, dy};
  c->dx[0] = build_like(c->g, "Conv2DBackpropInput", a, 3, x, c->op);
  rf_output b[3] = {x, sizes_of(c->g, w), dy};
  c->dx[1] = build_like(c->g, "Conv2DBackpropFilter", b, 3, x, c->op);
  return NULL;
}

/* z = BackpropInput(s, w, dy) is linear in w and in dy: for an incoming G
 * (input-shaped), d dy = conv(G, w) and d w = BackpropFilter(G, shape(w),
 * dy). */
static rf_status *conv2d_backprop_input_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output w = rf__input(c->op, 1), dy = rf__input(c->op, 2), G = c->dy[0];
  rf_output a[3] = {G, sizes_of(c->g, w), dy};
  c->dx[1] = build_like(c->g, "Conv2DBackpropFilter", a, 3, G, c->op);
  rf_output b[2] = {G, w};
  c->dx[2] = build_like(c->g, "Conv2D", b, 2, G, c->op);
  return NULL;
}

/* z = BackpropFilter(x, s, dy), linear in x and dy: for an incoming G
 * (filter-shaped), d x = BackpropInput(shape(x), G, dy), d dy = conv(x, G). */
static rf_status *conv2d_backprop_filter_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output x = rf__input(c->op, 0), dy = rf__input(c->op, 2), G = c->dy[0];
  rf_output a[3] = {sizes_of(c->g, x), G, dy};
  c->dx[0] = build_like(c->g, "Conv2DBackpropInput", a, 3, G, c->op);
  rf_output b[2] = {x, G};
  c->dx[2] = build_like(c->g, "Conv2D", b, 2, G, c->op);
  return NULL;
}

static rf_status *max_pool_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output y = {c->op, 0};
  rf_output a[3] = {rf__input(c->op, 0), y, c->dy[0]};
  c->dx[0] = build_like(c->g, "MaxPoolGrad", a, 3, a[0], c->op);
  return NULL;
}

static rf_status *avg_pool_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  rf_output x = rf__input(c->op, 0);
  rf_output a[2] = {sizes_of(c->g, x), c->dy[0]};
  c->dx[0] = build_like(c->g, "AvgPoolGrad", a, 2, x, c->op);
  return NULL;
}

/* AvgPoolGrad is linear in grad; its transpose is the pool itself. */
static rf_status *avg_pool_grad_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[1] = build_like(c->g, "AvgPool", c->dy, 1, c->dy[0], c->op);
  return NULL;
}

/* ---- registration ---- */

/* float16/bfloat16 run on GPU devices only (kernels/conv_prepare.c). */
#define T_ATTR "T: type in {float16, bfloat16, float32, float64}; "
#define WINDOW                                             \
  "strides: list(int); padding: string in {SAME, VALID}; " \
  "data_format: string in {NHWC} = NHWC"
#define CONV_ATTRS                              \
  T_ATTR WINDOW                                 \
      "; dilations: list(int) = [1, 1, 1, 1]; " \
      "filter_format: string in {HWIO, OHWI} = HWIO"
#define POOL_ATTRS T_ATTR "ksize: list(int); " WINDOW
/* The size vectors (input_sizes, filter_sizes, orig_input_shape): int32,
 * as TensorFlow's, or int64 for a dim past INT32_MAX (rf_gradients builds
 * those; the public builders take int32 alone). */
#define TSIZES_ATTR "; Tsizes: type in {int32, int64} = int32"

static const rf__op_spec specs[] = {
    {.name = "Conv2D",
     .inputs = "input: T, filter: T",
     .outputs = "output: T",
     .attrs = CONV_ATTRS,
     .shape = conv2d_shape,
     .grad = conv2d_grad},
    /* Conv2D -> BiasAdd -> Relu as one node (passes/fuse_epilogues.c,
     * rf_session_options.conv_epilogues): one cuDNN call on GPU devices. */
    {.name = "_FusedConv2DBiasRelu",
     .inputs = "input: T, filter: T, bias: T",
     .outputs = "activations: T",
     .attrs = CONV_ATTRS,
     .shape = fused_conv2d_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "Conv2DBackpropInput",
     .inputs = "input_sizes: Tsizes, filter: T, out_backprop: T",
     .outputs = "output: T",
     .attrs = CONV_ATTRS TSIZES_ATTR,
     .shape = conv2d_backprop_input_shape,
     .grad = conv2d_backprop_input_grad},
    {.name = "Conv2DBackpropFilter",
     .inputs = "input: T, filter_sizes: Tsizes, out_backprop: T",
     .outputs = "output: T",
     .attrs = CONV_ATTRS TSIZES_ATTR,
     .shape = conv2d_backprop_filter_shape,
     .grad = conv2d_backprop_filter_grad},
    {.name = "MaxPool",
     .inputs = "input: T",
     .outputs = "output: T",
     .attrs = POOL_ATTRS,
     .shape = pool_shape,
     .grad = max_pool_grad},
    {.name = "MaxPoolGrad",
     .inputs = "orig_input: T, orig_output: T, grad: T",
     .outputs = "output: T",
     .attrs = POOL_ATTRS,
     .shape = max_pool_grad_shape},
    /* MaxPoolGrad -> _ReluGrad of the ReLU the pool read as one node
     * (passes/fuse_epilogues.c, rf_session_options.conv_epilogues): the
     * gradient kept where orig_input > 0. */
    {.name = "_MaxPoolGradRelu",
     .inputs = "orig_input: T, orig_output: T, grad: T",
     .outputs = "output: T",
     .attrs = POOL_ATTRS,
     .shape = max_pool_grad_shape,
     .flags = RF_OP_NO_GRADIENT},
    {.name = "AvgPool",
     .inputs = "value: T",
     .outputs = "output: T",
     .attrs = POOL_ATTRS,
     .shape = pool_shape,
     .grad = avg_pool_grad},
    {.name = "AvgPoolGrad",
     .inputs = "orig_input_shape: Tsizes, grad: T",
     .outputs = "output: T",
     .attrs = POOL_ATTRS TSIZES_ATTR,
     .shape = avg_pool_grad_shape,
     .grad = avg_pool_grad_grad},
};

rf_status *rf__register_conv_ops(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    RF_CHECK(rf__op_register(&specs[i]));
  return NULL;
}

/* ---- public builders ---- */

static const int64_t ones4[4] = {1, 1, 1, 1};

/* A node of op over in[0, n) with the window attrs given; ksize NULL: none
 * (convolutions), dilations NULL: none (pools), filter_format NULL: the
 * default (HWIO; pools have none). */
static rf_output window_node(rf_graph *g, const char *op, const char *name,
                             const rf_output *in, int n, rf_output t,
                             const int64_t *ksize, const int64_t *strides,
                             const char *padding, const int64_t *dilations,
                             const char *filter_format) {
  if (rf__graph_failed(g) || !rf__graph_inputs_ok(g, op, name, in, n))
    return no_output;
  if (!strides || !padding) {
    rf__graph_refuse(g, op, name, "strides and padding are required (got %s)",
                     !strides && !padding ? "neither"
                     : !strides           ? "no strides"
                                          : "no padding");
    return no_output;
  }
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(t));
  if (ksize) rf_node_builder_attr_int_list(b, "ksize", ksize, 4);
  rf_node_builder_attr_int_list(b, "strides", strides, 4);
  rf_node_builder_attr_string(b, "padding", padding);
  if (dilations) rf_node_builder_attr_int_list(b, "dilations", dilations, 4);
  if (filter_format)
    rf_node_builder_attr_string(b, "filter_format", filter_format);
  return rf__finish_output(g, b);
}

rf_output rf_conv2d_with_format(rf_graph *g, const char *name, rf_output input,
                                rf_output filter, const int64_t strides[4],
                                const char *padding, const int64_t dilations[4],
                                const char *filter_format) {
  rf_output in[2] = {input, filter};
  return window_node(g, "Conv2D", name, in, 2, input, NULL, strides, padding,
                     dilations ? dilations : ones4, filter_format);
}

rf_output rf_conv2d(rf_graph *g, const char *name, rf_output input,
                    rf_output filter, const int64_t strides[4],
                    const char *padding, const int64_t dilations[4]) {
  return rf_conv2d_with_format(g, name, input, filter, strides, padding,
                               dilations, NULL);
}

/* The public builders take int32 size vectors, as documented (and as
 * TensorFlow's ops); the ops also take int64 ones (Tsizes), which
 * rf_gradients builds where a dim is past INT32_MAX. false (recorded) for
 * another dtype. */
static bool int32_sizes(rf_graph *g, const char *op, const char *name,
                        rf_output sizes, const char *arg) {
  if (rf__graph_failed(g) || !sizes.node) return true; /* reported later */
  rf_dtype dt = rf_output_dtype(sizes);
  if (dt == RF_INT32) return true;
  rf__graph_refuse(g, op, name, "input '%s' has dtype %s, expected int32", arg,
                   rf_dtype_name(dt));
  return false;
}

rf_output rf_conv2d_backprop_input_with_format(
    rf_graph *g, const char *name, rf_output input_sizes, rf_output filter,
    rf_output out_backprop, const int64_t strides[4], const char *padding,
    const int64_t dilations[4], const char *filter_format) {
  if (!int32_sizes(g, "Conv2DBackpropInput", name, input_sizes, "input_sizes"))
    return no_output;
  rf_output in[3] = {input_sizes, filter, out_backprop};
  return window_node(g, "Conv2DBackpropInput", name, in, 3, filter, NULL,
                     strides, padding, dilations ? dilations : ones4,
                     filter_format);
}

rf_output rf_conv2d_backprop_input(rf_graph *g, const char *name,
                                   rf_output input_sizes, rf_output filter,
                                   rf_output out_backprop,
                                   const int64_t strides[4],
                                   const char *padding,
                                   const int64_t dilations[4]) {
  return rf_conv2d_backprop_input_with_format(g, name, input_sizes, filter,
                                              out_backprop, strides, padding,
                                              dilations, NULL);
}

rf_output rf_conv2d_backprop_filter_with_format(
    rf_graph *g, const char *name, rf_output input, rf_output filter_sizes,
    rf_output out_backprop, const int64_t strides[4], const char *padding,
    const int64_t dilations[4], const char *filter_format) {
  if (!int32_sizes(g, "Conv2DBackpropFilter", name, filter_sizes,
                   "filter_sizes"))
    return no_output;
  rf_output in[3] = {input, filter_sizes, out_backprop};
  return window_node(g, "Conv2DBackpropFilter", name, in, 3, input, NULL,
                     strides, padding, dilations ? dilations : ones4,
                     filter_format);
}

rf_output rf_conv2d_backprop_filter(rf_graph *g, const char *name,
                                    rf_output input, rf_output filter_sizes,
                                    rf_output out_backprop,
                                    const int64_t strides[4],
                                    const char *padding,
                                    const int64_t dilations[4]) {
  return rf_conv2d_backprop_filter_with_format(g, name, input, filter_sizes,
                                               out_backprop, strides, padding,
                                               dilations, NULL);
}

rf_output rf_max_pool(rf_graph *g, const char *name, rf_output input,
                      const int64_t ksize[4], const int64_t strides[4],
                      const char *padding) {
  if (!ksize && !rf__graph_failed(g)) {
    rf__graph_refuse(g, "MaxPool", name, "ksize is required");
    return no_output;
  }
  return window_node(g, "MaxPool", name, &input, 1, input, ksize, strides,
                     padding, NULL, NULL);
}

rf_output rf_avg_pool(rf_graph *g, const char *name, rf_output input,
                      const int64_t ksize[4], const int64_t strides[4],
                      const char *padding) {
  if (!ksize && !rf__graph_failed(g)) {
    rf__graph_refuse(g, "AvgPool", name, "ksize is required");
    return no_output;
  }
  return window_node(g, "AvgPool", name, &input, 1, input, ksize, strides,
                     padding, NULL, NULL);
}

rf_output rf_max_pool_grad(rf_graph *g, const char *name, rf_output orig_input,
                           rf_output orig_output, rf_output grad,
                           const int64_t ksize[4], const int64_t strides[4],
                           const char *padding) {
  if (!ksize && !rf__graph_failed(g)) {
    rf__graph_refuse(g, "MaxPoolGrad", name, "ksize is required");
    return no_output;
  }
  rf_output in[3] = {orig_input, orig_output, grad};
  return window_node(g, "MaxPoolGrad", name, in, 3, grad, ksize, strides,
                     padding, NULL, NULL);
}

rf_output rf_avg_pool_grad(rf_graph *g, const char *name,
                           rf_output orig_input_shape, rf_output grad,
                           const int64_t ksize[4], const int64_t strides[4],
                           const char *padding) {
  if (!ksize && !rf__graph_failed(g)) {
    rf__graph_refuse(g, "AvgPoolGrad", name, "ksize is required");
    return no_output;
  }
  if (!int32_sizes(g, "AvgPoolGrad", name, orig_input_shape,
                   "orig_input_shape"))
    return no_output;
  rf_output in[2] = {orig_input_shape, grad};
  return window_node(g, "AvgPoolGrad", name, in, 2, grad, ksize, strides,
                     padding, NULL, NULL);
}
