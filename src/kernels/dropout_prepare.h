/* kernels/dropout_prepare.h - Dropout's attrs and the (step, device) that
 * key its generator (kernels/philox.h), shared by the CPU and GPU kernels:
 * step is the step's number in the job when the session is a task of one,
 * else the session's run number (1 for its first run); device is the
 * device's index in the session's device list. */
#ifndef RF_KERNELS_DROPOUT_PREPARE_H
#define RF_KERNELS_DROPOUT_PREPARE_H

#include <stdint.h>

#include "kernels/kernel.h"

typedef struct rf__dropout_key {
  double rate, scale; /* scale = 1 / (1 - rate) */
  uint64_t seed;
  int64_t step;
  /* In a captured step (GPU kernels only): where the step's number is in
   * device memory at each launch (rf__step.number_slot); else NULL. */
  const int64_t *step_slot;
  int device;
} rf__dropout_key;

#ifdef __cplusplus
extern "C" {
#endif

rf_status *rf__dropout_prepare(rf__kernel_ctx *ctx, rf__dropout_key *k);

#ifdef __cplusplus
}
#endif

#endif
