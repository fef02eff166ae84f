/* passes/passes.c - registers the library's graph passes (the family
 * rf__registry_init calls). A pass added to the library adds one line here;
 * placement, pruning and partitioning are fixed compile stages, not passes. */
#include "core/mem.h"
#include "passes/bucket_collectives.h"
#include "passes/fold_constants.h"
#include "passes/lower_collectives.h"
#include "passes/pass_registry.h"
#include "passes/single_collectives.h"

/* Replaces Reduce and Broadcast by per-device participants, then checks every
 * collective's participants before anything runs. */
static rf_status *lower_collectives_pass(rf__pass_ctx *ctx) {
  /* Up to 64 CPU plus 64 GPU devices. */
  int n = ctx->num_devices;
  rf__device_name *names = rf__malloc(sizeof *names * (size_t)(n ? n : 1));
  RF_CHECK_ALLOC(names);
  for (int i = 0; i < n; i++) names[i] = ctx->devices[i].name;
  rf_status *st = rf__lower_collectives(ctx->graph, names, n);
  if (!st) st = rf__validate_collectives(ctx->graph, names, n);
  rf__free(names);
  return st;
}

rf_status *rf__register_passes(void) {
  /* Values the static shapes decide become Consts before anything else
   * looks at the graph. */
  RF_CHECK(rf__pass_register(RF_PASS_POST_PLACEMENT, -40, "fold_constants",
                             rf__fold_constants));
  /* One participant first: what is left for buckets is communicated. */
  RF_CHECK(rf__pass_register(RF_PASS_POST_PLACEMENT, -30, "single_collectives",
                             rf__single_collectives));
  /* Epilogues before buckets: a fused node's outputs are what they pack. */
  RF_CHECK(rf__pass_register(RF_PASS_POST_PLACEMENT, -20, "fuse_epilogues",
                             rf__fuse_epilogues));
  RF_CHECK(rf__pass_register(RF_PASS_POST_PLACEMENT, -15, "fuse_xent_grad",
                             rf__fuse_xent_grad));
  /* Buckets first: lowering then checks the fused groups like any other. */
  RF_CHECK(rf__pass_register(RF_PASS_POST_PLACEMENT, -10, "bucket_collectives",
                             rf__bucket_collectives));
  RF_CHECK(rf__pass_register(RF_PASS_POST_PLACEMENT, -5, "group_updates",
                             rf__group_updates));
  return rf__pass_register(RF_PASS_POST_PLACEMENT, 0, "lower_collectives",
                           lower_collectives_pass);
}
