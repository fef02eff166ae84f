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
  k->step = !ctx->step                 ? 0
            : ctx->step->job_step >= 0 ? ctx->step->job_step
                                       : ctx->step->id;
  k->device = ctx->device ? ctx->device->index : 0;
  return NULL;
}
