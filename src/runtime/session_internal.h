/* runtime/session_internal.h - the session object and its compile cache,
 * shared by session.c (the public API) and compile.c. */
#ifndef RF_RUNTIME_SESSION_INTERNAL_H
#define RF_RUNTIME_SESSION_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/hash.h"
#include "ringflow/session.h"
#include "device/device.h"
#include "runtime/executor.h"
#include "device/rendezvous.h"

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
  /* Has a feed placed on a GPU device: its copy reads the caller's borrowed
   * tensor, so the step always waits for the GPU (runtime/session_sync.c). */
  bool gpu_feeds;
  /* Records of this plan's pipelined steps that are free for reuse (their
   * fences are made for `gpus`); guarded by the session's pending_mu. */
  struct rf__pending_step *spare;
  /* The step as a CUDA graph (gpu_graphs on, CUDA builds, GPU devices in
   * the plan): runtime/step_graph.h. NULL otherwise. */
  struct rf__step_graph *step_graph;
  UT_hash_handle hh;
} rf__plan;

/* Requests a session remembers (a training loop alternates a few: the
 * step, an evaluation, a checkpoint's reads). */
#define RF__RECENT_REQUESTS 8

struct rf_session {
  rf_graph *graph;         /* the session's copy of the user's graph */
  rf_session_options opts; /* its strings point at the session's copies */
  char *dump_graph_dir;    /* opts.dump_graph_dir's copy */
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
  /* The requests of recent runs as their callers gave them, each with its
   * plan, so a run that repeats one looks up no name (session.c); under
   * cache_mu, replaced in turn from recent_next. */
  struct rf__request *recent[RF__RECENT_REQUESTS];
  int recent_next;
  /* Steps that returned before their GPU work ran (gpu_sync_on_finish off)
   * and whose checks still wait for it, oldest first; the first error of a
   * check run since, not yet reported (runtime/session_sync.c). */
  pthread_mutex_t pending_mu;
  struct rf__pending_step *pending, *pending_tail;
  atomic_int num_pending;
  rf_status *deferred_error;
  atomic_bool has_deferred_error;
  /* Runs under way and whether one captures its step as a CUDA graph
   * (gpu_graphs; runtime/step_graph.h). */
  pthread_mutex_t graph_mu;
  pthread_cond_t graph_cv;
  int graph_runs;
  bool graph_capturing;
  /* Step graphs kept for replay, of all plans (at most RF__GRAPH_MAX_KEPT:
   * each holds its step's device memory). */
  atomic_int graphs_kept;
  /* RF_GPU_GRAPH_DEBUG's flags (runtime/step_graph.h), read when the
   * session is made with gpu_graphs on and GPU devices. */
  int graph_debug;
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
/* Every node of s's graph requests a device s has (or none): what
 * rf_session_new can refuse before any run. Errors name the node, op and
 * device and how many devices s has. */
rf_status *rf__session_check_devices(rf_session *s);

/* ---- the end of a step's GPU work (runtime/session_sync.c) ---- */

struct rf__step;

/* Whether a step of plan p may return before its GPU work has run: the
 * session's gpu_sync_on_finish is off and the plan has GPU devices, no
 * GPU feed and no collective with other tasks; a traced step always
 * waits. */
bool rf__step_may_pipeline(const rf_session *s, const rf__plan *p, bool traced);
/* Ends step's GPU part; run_st is the executor's result (consumed). A step
 * that failed or is not step->pipelined waits for the plan's GPU streams
 * and runs its checks now (the first error of the three is returned); a
 * pipelined step that succeeded hands its checks, if any, to the session
 * behind a fence, and returns NULL. */
rf_status *rf__session_end_step(rf_session *s, rf__plan *p,
                                struct rf__step *step, rf_status *run_st);
/* Runs the checks of pipelined steps whose GPU work has run, without
 * waiting, then takes the first error of a deferred check not yet reported
 * (NULL: none). At the start of every run. */
rf_status *rf__session_take_deferred(rf_session *s);
/* Session setup and teardown of the above; rf__session_sync_free first
 * waits for every pending step (its error is dropped). */
void rf__session_sync_init(rf_session *s);
void rf__session_sync_free(rf_session *s);
/* Frees p's spare records (rf__plan_free). */
void rf__plan_free_spares(rf__plan *p);

#endif
