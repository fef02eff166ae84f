/* passes/fuse_xent_grad.c - the POST_PLACEMENT pass that gives a sparse
 * softmax cross-entropy its gradient in the same node:
 *
 *   SparseSoftmaxCrossEntropyWithLogits(x, labels) -> (loss, backprop)
 *   _SparseXentGrad(dloss, backprop)               -> grad
 *     =>  _SparseXentWithGrad(x, labels, dloss)    -> (loss, grad)
 *
 * when the gradient op is the backprop's one reader (a fetched backprop
 * stays) and dloss does not depend on the loss, which holds once
 * fold_constants made the mean's gradient a Const. One kernel then writes
 * the gradient where two wrote the backprop and read it again: a launch
 * fewer on a GPU, a pass over (batch, classes) fewer on a CPU. The fused
 * kernels round the backprop to T before the product, as the two ops do,
 * so results are bit-identical. On every local device;
 * RF_FUSE_XENT_GRAD=0 in the environment turns the pass off (for
 * measuring). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "ops/op_registry.h"
#include "passes/node_match.h"
#include "passes/node_merge.h"
#include "passes/pass_registry.h"

/* Whether n runs on a device of this process. */
static bool local(const rf__pass_ctx *pc, const rf_node *n) {
  int d = n->assigned_device;
  return d >= 0 && d < pc->num_devices && !pc->devices[d].remote;
}

/* Cross-entropy x with the gradient op that is its backprop's one reader. */
static rf_status *fuse(rf__pass_ctx *pc, rf__merge_ctx *mc, rf_node *x,
                       int *fused) {
  rf__edge *e = rf__merge_only_reader(x, 1);
  rf_node *gr = e ? e->dst : NULL;
  if (!gr || e->dst_in != 1 || !rf__node_is(gr, "_SparseXentGrad") ||
      gr->assigned_device != x->assigned_device || !gr->data_in[0] ||
      gr->data_in[0]->src == x) /* dloss is the loss: no order for both */
    return NULL;
  rf_node *m[2] = {x, gr};
  if (!rf__merge_ok(mc, m, 2)) return NULL;
  rf_output in[3] = {rf__input(x, 0), rf__input(x, 1), rf__input(gr, 0)};
  rf_node *f;
  RF_CHECK(rf__merge_add_node(pc->graph, x,
                              pc->devices[x->assigned_device].canonical,
                              "_SparseXentWithGrad", in, 3, &x->attrs, &f));
  f->out_shapes[0] = x->out_shapes[0];
  f->out_shapes[1] = gr->out_shapes[0];
  RF_CHECK(rf__merge_redirect(pc->graph, x, 0, f, 0));
  RF_CHECK(rf__merge_redirect(pc->graph, gr, 0, f, 1));
  RF__LOG(RF_LOG_INFO,
          "compile %ld: SparseSoftmaxCrossEntropyWithLogits '%.200s' + "
          "_SparseXentGrad '%.200s' on %s as one _SparseXentWithGrad "
          "'%.200s'",
          pc->compile, x->name, gr->name,
          pc->devices[f->assigned_device].canonical, f->name);
  (*fused)++;
  return rf__merge_retire(mc, m, 2, f);
}

rf_status *rf__fuse_xent_grad(rf__pass_ctx *ctx) {
  const char *env = getenv("RF_FUSE_XENT_GRAD");
  if (env && strcmp(env, "0") == 0) return NULL;
  rf_graph *g = ctx->graph;
  rf__merge_ctx mc;
  rf_status *st = rf__merge_ctx_init(&mc, g);
  /* Nodes made by the pass get ids past `ids` and are not visited. */
  int ids = g->num_ids, fused = 0;
  for (int id = 0; !st && id < ids; id++) {
    rf_node *n = g->nodes[id];
    if (n && rf__node_is(n, "SparseSoftmaxCrossEntropyWithLogits") &&
        local(ctx, n) && n->data_in[0] && n->data_in[1])
      st = fuse(ctx, &mc, n, &fused);
  }
  rf__merge_ctx_free(&mc);
  return st ? rf__status_prefix(st, "fusing cross-entropy gradients") : NULL;
}
