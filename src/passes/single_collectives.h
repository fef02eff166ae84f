/* passes/single_collectives.h - collectives of one participant become
 * Identity at compile time (single_collectives.c). */
#ifndef RF_PASSES_SINGLE_COLLECTIVES_H
#define RF_PASSES_SINGLE_COLLECTIVES_H

#include "passes/pass_registry.h"

/* After placement, before buckets and lowering, in a session of one
 * process: each AllReduce, AllGather or ReduceScatter with num_devices 1
 * and no other participant of its shared_name, and each Reduce of one
 * input on its own device, becomes Identity (same name, device and edges),
 * except float32 all-reduces that a narrower wire dtype would round and
 * all-reduces with a comm_dtype attr other than float32. Out of memory is
 * the only error. */
rf_status *rf__single_collectives(rf__pass_ctx *ctx);

#endif
