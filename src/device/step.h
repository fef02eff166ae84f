/* device/step.h - one run of a session: step id, feeds and fetches, the
 * rendezvous for cross-device tensors, cancellation, and the checks that run
 * once the step's GPU work has finished. */
#ifndef RF_RUNTIME_STEP_H
#define RF_RUNTIME_STEP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

struct rf__rendezvous;
struct rf__collective_manager;
struct rf__trace;

/* A check of work that reported done before it ran on its GPU streams (a
 * GPU collective completes in stream order: its consumers are ordered after
 * it on the streams). The session calls fn(arg) exactly once, after the
 * step's GPU streams have passed the step - also after a failed step - and
 * fails the step with what it returns (NULL: fine). In a pipelined step
 * (below) that is later, on another thread: from a later run (whose error
 * it then becomes), rf_session_sync or rf_session_free. Embed one in the
 * work's record, which must live until fn has run. */
typedef struct rf__step_check {
  rf_status *(*fn)(void *arg);
  void *arg;
  struct rf__step_check *next;
} rf__step_check;

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
  /* The session returns once the step's GPU work is enqueued, and runs the
   * checks later, when its streams have passed the step (gpu_sync_on_finish
   * off): work a check watches for a timeout must tell by itself whether it
   * has run (the NCCL backend records events). Failed steps still wait. */
  bool pipelined;
  _Atomic(rf__step_check *) checks; /* newest first; see rf__step_check */
  /* The step's GPU work is being captured into a CUDA graph
   * (rf_session_options.gpu_graphs; runtime/gpu/step_graph.c): it is
   * recorded, not run, and replayed later. A kernel that would wait for its
   * stream on the host treats the work as done (the graph keeps the order),
   * and one whose result would not be replayed (a value made on the host)
   * says why in `not_replayable` (a static string): the step then runs
   * normally and the plan is not captured again. */
  bool capturing;
  /* While capturing: the executor enqueues the kernels of all the step's
   * devices one at a time, not one at a time per device (a debugging
   * switch: RF_GPU_GRAPH_DEBUG=serial, runtime/step_graph.h). */
  bool capture_serial;
  _Atomic(const char *) not_replayable;
  /* While capturing: device memory on the step's GPU that holds the step's
   * number (rf__step_number) when each launch of the graph runs (the graph
   * writes it first). A GPU kernel keyed by the step reads it there, not
   * the value at enqueue, so that a replay gets its own step's number. */
  const int64_t *number_slot;
  atomic_bool number_read; /* a kernel of the capture reads number_slot */
} rf__step;

/* The step's number as Dropout keys it: its number in the job when the
 * session is a task of one, else the session's run number (its id). */
static inline int64_t rf__step_number(const rf__step *s) {
  return s->job_step >= 0 ? s->job_step : s->id;
}

/* Adds c (filled by the caller, unlinked) to the step's checks. Any thread,
 * while the step runs (before the done of the kernel that adds it). */
static inline void rf__step_add_check(rf__step *s, rf__step_check *c) {
  c->next = atomic_load_explicit(&s->checks, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(
      &s->checks, &c->next, c, memory_order_release, memory_order_relaxed)) {
  }
}

#endif
