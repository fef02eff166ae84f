/* passes/fold_constants.h - the POST_PLACEMENT pass that replaces nodes
 * whose value the static shapes decide (OnesLike, ZerosLike, and the
 * gradient of a full Sum or Mean of a constant) by Consts; see
 * fold_constants.c. */
#ifndef RF_PASSES_FOLD_CONSTANTS_H
#define RF_PASSES_FOLD_CONSTANTS_H

#include "passes/pass_registry.h"

/* The largest value folded, in bytes: a folded Const is kept for the
 * session's life (on a GPU in device memory), where the kernel it replaces
 * wrote transient memory. */
#define RF_FOLD_MAX_BYTES ((size_t)1 << 20)

rf_status *rf__fold_constants(rf__pass_ctx *ctx);

#endif
