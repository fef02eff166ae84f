/* passes/bucket_collectives.h - fusing all-reduces into buckets and
 * narrowing their wire dtype at compile time (bucket_collectives.c). */
#ifndef RF_PASSES_BUCKET_COLLECTIVES_H
#define RF_PASSES_BUCKET_COLLECTIVES_H

#include "passes/pass_registry.h"

/* Rewrites ctx->graph's AllReduce groups (after placement, before lowering):
 * independent groups of one key fuse into buckets of at most
 * ctx->bucket_bytes (0: none fuse), and float32 groups whose wire dtype
 * (comm_dtype attr, else ctx->comm_dtype) is narrower get a Cast on each
 * side (in a job: the buckets rf__bucket_collectives_plan recorded, of
 * the groups this compile kept). Malformed groups are left for the group
 * checks. INVALID_ARGUMENT naming the node for a comm_dtype on a non-float32
 * all-reduce. */
rf_status *rf__bucket_collectives(rf__pass_ctx *ctx);

/* In a job (ctx->num_tasks > 1), on the whole job's placed graph before
 * this process prunes it: decides the buckets as above and records each
 * one's place on its participants, so that rf__bucket_collectives, which in
 * a job fuses only what was recorded, fuses alike in every process whatever
 * each one's feeds and fetches prune. */
rf_status *rf__bucket_collectives_plan(rf__pass_ctx *ctx);

#endif
