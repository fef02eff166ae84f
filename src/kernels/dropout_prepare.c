/* kernels/dropout_prepare.c - see dropout_prepare.h. */
#include "kernels/dropout_prepare.h"

#include "core/status.h"
#include "device/device.h"
#include "device/step.h"

rf_status *rf__dropout_prepare(rf__kernel_ctx *ctx, rf__dropout_key *k) {
  int64_t seed;
  rf_status *st = rf__attrs_get_float(&ctx->node->attrs, "rate", &k->rate);
  if (!st) st = rf__attrs_get_int(&ctx->node->attrs, "seed", &seed);
  if (!st && !(k->rate >= 0 && k->rate < 1))
    st = rf__invalid("rate %g must be in [0, 1)", k->rate);
  if (st) return rf__kernel_error_at(ctx, st);
  k->seed = (uint64_t)seed;
  k->scale = 1.0 / (1.0 - k->rate);
  k->step = ctx->step ? rf__step_number(ctx->step) : 0;
  k->step_slot = NULL;
  if (ctx->step && ctx->step->capturing) {
    k->step_slot = ctx->step->number_slot;
    atomic_store(&ctx->step->number_read, true);
    if (!k->step_slot) /* the graph would repeat this step's mask */
      atomic_store(&ctx->step->not_replayable,
                   "a Dropout node's step number has no slot in device "
                   "memory");
  }
  k->device = ctx->device ? ctx->device->index : 0;
  return NULL;
}
