/* passes/fuse_epilogues.c - the POST_PLACEMENT pass that gives MatMuls
 * their epilogues (rf_session_options.matmul_epilogues; docs/PERFORMANCE.md,
 * "MatMul epilogues"), so that a GPU runs one cuBLASLt product where it ran
 * a GEMM and one to three memory-bound kernels:
 *
 *   MatMul -> BiasAdd -> Relu   =>  _FusedMatMulBiasRelu(a, b, bias)
 *   MatMul -> BiasAdd           =>  _FusedMatMulBias(a, b, bias)
 *   MatMul(x, G, transpose_a) and _BiasAddGrad(G)
 *                               =>  _FusedMatMulBiasGrad(x, G): 2 outputs
 *   Conv2D -> BiasAdd -> Relu   =>  _FusedConv2DBiasRelu(x, f, bias)
 *   MaxPoolGrad(r, p, dp) -> _ReluGrad(., z), r = Relu(z) (or r itself)
 *                               =>  _MaxPoolGradRelu(r, p, dp)
 *                                   (both: rf_session_options.conv_epilogues)
 *
 * The forward rewrites need the product to feed the BiasAdd alone; the ReLU
 * joins when every other reader of the sum is a _ReluGrad's features input,
 * which then reads the ReLU's output instead (x > 0 exactly where
 * relu(x) > 0). The bias gradient joins the product that reduces G over the
 * same rows: G as b untransposed (sum over k of the rows of b) or as a
 * transposed. The pass runs after gradients were built (they are part of
 * the graph it sees), so the fused ops need no gradient. Nodes are merged
 * only when no path leaves one of them and comes back to another through
 * other nodes, so fusing never makes a cycle. */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "ops/op_registry.h"
#include "passes/node_match.h"
#include "passes/node_merge.h"
#include "passes/pass_registry.h"
#include "ringflow/session.h"

typedef struct fuse_ctx {
  rf__pass_ctx *pc;
  rf_graph *g;
  rf__merge_ctx merge;
  int fused; /* nodes made */
} fuse_ctx;

/* Whether n's device takes epilogues under `mode`, the session's
 * matmul_epilogues or conv_epilogues (their values are the same). */
static bool device_ok(const fuse_ctx *c, const rf_node *n, int mode) {
  int d = n->assigned_device;
  if (d < 0 || d >= c->pc->num_devices || c->pc->devices[d].remote)
    return false;
  if (mode == RF_MATMUL_EPILOGUES_ALL) return true;
  return (mode == RF_MATMUL_EPILOGUES_GPU ||
          mode == RF_MATMUL_EPILOGUES_AUTO) &&
         c->pc->devices[d].name.type == RF_DEVICE_GPU;
}

/* Whether products of dtype t fuse under the session's matmul_epilogues:
 * RF_MATMUL_EPILOGUES_AUTO (the default) takes float32 alone. */
static bool dtype_ok(const fuse_ctx *c, rf_dtype t) {
  if (c->pc->matmul_epilogues == RF_MATMUL_EPILOGUES_AUTO)
    return t == RF_FLOAT32;
  return t == RF_FLOAT32 || t == RF_FLOAT16 || t == RF_BFLOAT16;
}

/* A MatMul that may be fused (all its inputs connected). */
static bool matmul_ok(const fuse_ctx *c, const rf_node *n) {
  return n && rf__node_is(n, "MatMul") &&
         device_ok(c, n, c->pc->matmul_epilogues) && n->data_in[0] &&
         n->data_in[1] && dtype_ok(c, n->out_dtypes[0]);
}

/* A Conv2D that may be fused (all its inputs connected; any of its dtypes:
 * the fused kernel runs the unfused ones where its fast path cannot). */
static bool conv_ok(const fuse_ctx *c, const rf_node *n) {
  return n && rf__node_is(n, "Conv2D") &&
         device_ok(c, n, c->pc->conv_epilogues) && n->data_in[0] &&
         n->data_in[1];
}

/* A node of `op_name` on mm's device with mm's attrs (and bias_input >= 0
 * for the gradient), inputs in[0, nin). */
static rf_status *add_fused(fuse_ctx *c, const rf_node *mm, const char *op_name,
                            const rf_output *in, int nin, int64_t bias_input,
                            rf_node **out) {
  rf__attrs a = {0};
  rf_status *st = rf__attrs_copy(&mm->attrs, &a);
  if (!st && bias_input >= 0) {
    rf__attr_value v = rf__attr_int(bias_input);
    st = rf__attrs_set(&a, "bias_input", &v);
  }
  if (!st)
    st = rf__merge_add_node(c->g, mm,
                            c->pc->devices[mm->assigned_device].canonical,
                            op_name, in, nin, &a, out);
  rf__attrs_clear(&a);
  return st;
}

/* MatMul or Conv2D mm -> BiasAdd [-> Relu]; a Conv2D only with its Relu. */
static rf_status *fuse_forward(fuse_ctx *c, rf_node *mm) {
  bool conv = rf__node_is(mm, "Conv2D");
  rf__edge *e = rf__merge_only_reader(mm, 0);
  rf_node *ba = e ? e->dst : NULL;
  if (!ba || e->dst_in != 0 || !rf__node_is(ba, "BiasAdd") ||
      ba->assigned_device != mm->assigned_device || !ba->data_in[1])
    return NULL;
  /* The ReLU joins when it is the sum's one reader besides _ReluGrads of
   * the sum as features. */
  rf_node *relu = NULL;
  bool relu_ok = true;
  for (int k = 0; k < ba->num_out_edges; k++) {
    const rf__edge *o = ba->out_edges[k];
    if (o->src_out == RF_CONTROL_SLOT) continue;
    if (rf__node_is(o->dst, "Relu") && !relu &&
        o->dst->assigned_device == ba->assigned_device)
      relu = o->dst;
    else if (!(rf__node_is(o->dst, "_ReluGrad") && o->dst_in == 1))
      relu_ok = false;
  }
  if (!relu_ok) relu = NULL;
  if (conv && !relu) return NULL;
  rf_node *m[3] = {mm, ba, relu};
  int nm = relu ? 3 : 2;
  if (!rf__merge_ok(&c->merge, m, nm)) return NULL;
  rf_output in[3] = {rf__input(mm, 0), rf__input(mm, 1), rf__input(ba, 1)};
  const char *op = conv   ? "_FusedConv2DBiasRelu"
                   : relu ? "_FusedMatMulBiasRelu"
                          : "_FusedMatMulBias";
  rf_node *f;
  RF_CHECK(add_fused(c, mm, op, in, 3, -1, &f));
  rf_node *last = m[nm - 1];
  f->out_shapes[0] = last->out_shapes[0];
  RF_CHECK(rf__merge_redirect(c->g, last, 0, f, 0));
  if (relu)
    RF_CHECK(rf__merge_redirect(c->g, ba, 0, f, 0)); /* the _ReluGrads */
  RF__LOG(RF_LOG_INFO,
          "compile %ld: %s '%.200s' + BiasAdd%s on %s as one %s '%.200s'",
          c->pc->compile, mm->op->name, mm->name, relu ? " + Relu" : "",
          c->pc->devices[f->assigned_device].canonical, op, f->name);
  c->fused++;
  return rf__merge_retire(&c->merge, m, nm, f);
}

/* _BiasAddGrad bg of G with a MatMul that reduces G over k. */
static rf_status *fuse_bias_grad(fuse_ctx *c, rf_node *bg) {
  if (!bg->data_in[0] || !device_ok(c, bg, c->pc->matmul_epilogues))
    return NULL;
  rf_node *src = bg->data_in[0]->src;
  int out = bg->data_in[0]->src_out;
  for (int k = 0; k < src->num_out_edges; k++) {
    const rf__edge *e = src->out_edges[k];
    rf_node *mm = e->dst;
    if (e->src_out != out || !matmul_ok(c, mm) ||
        mm->assigned_device != bg->assigned_device)
      continue;
    int64_t which;
    if (e->dst_in == 1 && !rf__node_flag(mm, "transpose_b"))
      which = 1;
    else if (e->dst_in == 0 && rf__node_flag(mm, "transpose_a"))
      which = 0;
    else
      continue;
    rf_node *m[2] = {mm, bg};
    if (!rf__merge_ok(&c->merge, m, 2)) continue;
    rf_output in[2] = {rf__input(mm, 0), rf__input(mm, 1)};
    rf_node *f;
    RF_CHECK(add_fused(c, mm, "_FusedMatMulBiasGrad", in, 2, which, &f));
    f->out_shapes[0] = mm->out_shapes[0];
    f->out_shapes[1] = bg->out_shapes[0];
    RF_CHECK(rf__merge_redirect(c->g, mm, 0, f, 0));
    RF_CHECK(rf__merge_redirect(c->g, bg, 0, f, 1));
    RF__LOG(RF_LOG_INFO,
            "compile %ld: MatMul '%.200s' + _BiasAddGrad '%.200s' on %s as "
            "one _FusedMatMulBiasGrad '%.200s'",
            c->pc->compile, mm->name, bg->name,
            c->pc->devices[f->assigned_device].canonical, f->name);
    c->fused++;
    return rf__merge_retire(&c->merge, m, 2, f);
  }
  return NULL;
}

/* Whether edges a and b carry the same tensor. */
static bool same_tensor(const rf__edge *a, const rf__edge *b) {
  return a && b && a->src == b->src && a->src_out == b->src_out;
}

/* _ReluGrad rg of a MaxPoolGrad's result, masked by the ReLU the pool read:
 * rg's features are the pool's input r, or z where r = Relu(z) (z > 0
 * exactly where r > 0). */
static rf_status *fuse_pool_relu_grad(fuse_ctx *c, rf_node *rg) {
  if (!rg->data_in[0] || !rg->data_in[1] ||
      !device_ok(c, rg, c->pc->conv_epilogues))
    return NULL;
  rf_node *pg = rg->data_in[0]->src;
  if (!rf__node_is(pg, "MaxPoolGrad") || rg->data_in[0]->src_out != 0 ||
      pg->assigned_device != rg->assigned_device || !pg->data_in[0] ||
      !pg->data_in[1] || !pg->data_in[2] ||
      rf__merge_only_reader(pg, 0) != rg->data_in[0])
    return NULL;
  const rf__edge *r = pg->data_in[0], *z = rg->data_in[1];
  const rf_node *relu = r->src;
  bool masked =
      same_tensor(r, z) || (r->src_out == 0 && rf__node_is(relu, "Relu") &&
                            same_tensor(relu->data_in[0], z));
  if (!masked) return NULL;
  rf_node *m[2] = {pg, rg};
  if (!rf__merge_ok(&c->merge, m, 2)) return NULL;
  rf_output in[3] = {rf__input(pg, 0), rf__input(pg, 1), rf__input(pg, 2)};
  rf_node *f;
  RF_CHECK(add_fused(c, pg, "_MaxPoolGradRelu", in, 3, -1, &f));
  f->out_shapes[0] = rg->out_shapes[0];
  RF_CHECK(rf__merge_redirect(c->g, rg, 0, f, 0));
  RF__LOG(RF_LOG_INFO,
          "compile %ld: MaxPoolGrad '%.200s' + _ReluGrad '%.200s' on %s as "
          "one _MaxPoolGradRelu '%.200s'",
          c->pc->compile, pg->name, rg->name,
          c->pc->devices[f->assigned_device].canonical, f->name);
  c->fused++;
  return rf__merge_retire(&c->merge, m, 2, f);
}

static rf_status *run(fuse_ctx *c) {
  /* Nodes made by the pass get ids past `ids` and are not visited. */
  int ids = c->g->num_ids;
  for (int id = 0; id < ids; id++) {
    rf_node *n = c->g->nodes[id];
    if (matmul_ok(c, n) || conv_ok(c, n)) RF_CHECK(fuse_forward(c, n));
  }
  for (int id = 0; id < ids; id++) {
    rf_node *n = c->g->nodes[id];
    if (n && rf__node_is(n, "_BiasAddGrad") && dtype_ok(c, n->out_dtypes[0]))
      RF_CHECK(fuse_bias_grad(c, n));
  }
  for (int id = 0; id < ids; id++) {
    rf_node *n = c->g->nodes[id];
    if (n && rf__node_is(n, "_ReluGrad")) RF_CHECK(fuse_pool_relu_grad(c, n));
  }
  return NULL;
}

rf_status *rf__epilogue_options_check(int matmul, int conv) {
  if (matmul != RF_MATMUL_EPILOGUES_GPU && matmul != RF_MATMUL_EPILOGUES_OFF &&
      matmul != RF_MATMUL_EPILOGUES_ALL && matmul != RF_MATMUL_EPILOGUES_AUTO)
    return rf__invalid(
        "session options: matmul_epilogues must be RF_MATMUL_EPILOGUES_OFF "
        "(0), RF_MATMUL_EPILOGUES_GPU (1), RF_MATMUL_EPILOGUES_ALL (2) or "
        "RF_MATMUL_EPILOGUES_AUTO (3), got %d",
        matmul);
  if (conv != RF_CONV_EPILOGUES_GPU && conv != RF_CONV_EPILOGUES_OFF &&
      conv != RF_CONV_EPILOGUES_ALL)
    return rf__invalid(
        "session options: conv_epilogues must be RF_CONV_EPILOGUES_OFF (0), "
        "RF_CONV_EPILOGUES_GPU (1) or RF_CONV_EPILOGUES_ALL (2), got %d",
        conv);
  return NULL;
}

rf_status *rf__fuse_epilogues(rf__pass_ctx *ctx) {
  int mode = ctx->matmul_epilogues, conv = ctx->conv_epilogues;
  RF_CHECK(rf__epilogue_options_check(mode, conv));
  if (mode == RF_MATMUL_EPILOGUES_OFF && conv == RF_CONV_EPILOGUES_OFF)
    return NULL;
  fuse_ctx c = {.pc = ctx, .g = ctx->graph};
  rf_status *st = rf__merge_ctx_init(&c.merge, ctx->graph);
  if (!st) st = run(&c);
  rf__merge_ctx_free(&c.merge);
  return st ? rf__status_prefix(st, "fusing epilogues") : NULL;
}
