/* runtime/session_internal.h - the session object and its compile cache,
 * shared by session.c (the public API) and compile.c. */
#ifndef RF_RUNTIME_SESSION_INTERNAL_H
#define RF_RUNTIME_SESSION_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/hash.h"
#include "ringflow/session.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/rendezvous.h"

/* One compiled (feeds, fetches, targets) signature. Immutable once cached. */
typedef struct rf__plan {
  char *signature; /* cache key */
  rf_graph *graph; /* the compiled graph; the executor points into it */
  rf__executor *executor;
  int num_feeds, num_fetches;
  /* The GPU devices holding nodes of the plan: their streams are synchronised
   * at the end of every step (rf__malloc'ed; NULL when none). */
  rf__device **gpus;
  int num_gpus;
  /* Holds participants of collectives with other tasks of the job. */
  bool cross_task;
  UT_hash_handle hh;
} rf__plan;

struct rf_session {
  rf_graph *graph; /* the session's copy of the user's graph */
  rf_session_options opts;
  char default_device_name[RF_DEVICE_NAME_MAX];
  int default_device;
  rf__threadpool *pool;
  /* CPU devices first, then GPU devices: [0, num_devices) are this
   * process's; in a job session [num_devices, num_job_devices) are the other
   * tasks' (remote), in task order. */
  rf__device *devices;
  int num_devices, num_job_devices;
  struct rf__job *job; /* NULL: one process */
  int task, num_tasks; /* 0 of 1 without a job */
  atomic_llong next_job_step;
  struct rf__gpu_runtime *gpu; /* streams, handles, caches; NULL: no GPUs */
  rf__rendezvous *rendezvous;
  struct rf__collective_manager *collectives;
  pthread_mutex_t trace_mu;
  char *trace_path; /* armed by rf_session_trace_next_run; taken by one run */
  atomic_llong next_step;
  pthread_mutex_t cache_mu;
  rf__plan *cache; /* uthash by signature */
};

/* A run's request, resolved to nodes of the session's graph. */
typedef struct rf__signature {
  const rf_output *feeds;
  int num_feeds;
  const rf_output *fetches;
  int num_fetches;
  rf_node *const *targets;
  int num_targets;
} rf__signature;

/* Compiles sig against s's graph: copy, _Retval per fetch, _Arg per feed,
 * prune, passes, placement, partition, executor plans. Errors name the node. */
rf_status *rf__compile(rf_session *s, const rf__signature *sig, rf__plan **out);
void rf__plan_free(rf__plan *p);

#endif
