/* runtime/step.h - one run of a session: step id, feeds and fetches, the
 * rendezvous for cross-device tensors, and cancellation. */
#ifndef RF_RUNTIME_STEP_H
#define RF_RUNTIME_STEP_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/tensor.h"

struct rf__rendezvous;
struct rf__collective_manager;
struct rf__trace;

typedef struct rf__step {
  int64_t id;
  int num_feeds;
  rf_tensor *const *feeds; /* by _Arg index; borrowed */
  int num_fetches;
  rf_tensor **fetches; /* by _Retval index; filled by _Retval kernels */
  struct rf__rendezvous *rendezvous;
  atomic_int cancelled; /* set once the step has failed or was cancelled */
  int64_t collective_timeout_ms;
  struct rf__collective_manager *collectives; /* the session's; not owned */
  struct rf__trace *trace; /* non-NULL: record every kernel of this step */
  /* In a session that is one task of a job: the step's number in the job
   * (the k-th run of the session in every process); -1 otherwise. */
  int64_t job_step;
} rf__step;

#endif
