/* tools/train_job.h - `ringflow train` across the processes of an MPI job
 * (mpirun -np N ringflow train --devices cpu:0-1): every process builds the
 * same job-wide graph, whose replicas are "/task:t/<device>" for every task
 * t and every --devices entry, trains its own replicas on their rows of each
 * global batch, and exchanges through collectives what one process would
 * have computed alone (the mean loss, test counts, whether replicas agree). */
#ifndef RF_TOOLS_TRAIN_JOB_H
#define RF_TOOLS_TRAIN_JOB_H

#include "devices.h"
#include "mlp.h"

typedef struct train_job {
  int task, ntasks;
  int nlocal, first; /* this process's replicas: [first, first + nlocal) */
} train_job;

typedef struct trainer {
  mlp_config cfg;
  mlp_graph m;
  rf_session *s;
  int64_t step; /* Adam's t */
  bool job;     /* replicas in other processes too */
  int first, nlocal;
  /* The next step's batch, built while a step runs (NULL: each step builds
   * its own, or feeds indices with cfg.data_rows); train.c's feeder is its
   * argument. */
  struct prefetch *pf;
  struct feeder {
    const struct trainer *t;
    const void *data; /* train.c's dataset */
  } feed;
} trainer;

/* Learns this process's task (rf_job_tasks) and, with several, names the
 * whole job's replicas in cfg (every task has this process's --devices,
 * local). 0, or the command's exit code (reported). */
int train_job_init(train_job *j, const tool_devices *local, mlp_config *cfg);

/* Task 0's start-up checks (the --save and --trace paths), shared:
 * collectively, every task learns whether task 0 refused its start-up, so
 * that the others fail at once instead of waiting for task 0 in their
 * first session until the collective timeout. lead_st: task 0's result
 * (NULL: passed; the other tasks pass NULL; taken). timeout_ms: the
 * collective timeout. Returns lead_st on task 0, on the others an error
 * saying that task 0 refused (its code; task 0 prints why); or the
 * exchange's own error. A job of one task returns lead_st at once. */
rf_status *train_job_start(const train_job *j, int64_t timeout_ms,
                           rf_status *lead_st);

/* After an epoch, collectively: *right (test rows right here) becomes the
 * job's count, *spread (the largest difference among this process's
 * replicas) the job's, 0 when every replica holds the same bytes. params:
 * this process's first replica's parameters (borrowed). */
rf_status *train_job_epoch(trainer *t, rf_tensor **params, int64_t *right,
                           double *spread);

#endif
