/* comm/job.h - a session as one task of a job of several processes (MPI
 * builds; docs/MULTIPROCESS.md). Task k is rank k of the job's communicator.
 * Every process makes the same sessions and the same runs in the same order:
 * the k-th run of a session is job step k everywhere, and collectives with
 * participants in several processes meet under (shared_name, job step).
 * All MPI calls come from one communication thread (comm/mpi/engine.c);
 * nothing here blocks an executor thread. Without MPI, rf__job_attach fails
 * and the other calls are never made (there is no job). */
#ifndef RF_COMM_JOB_H
#define RF_COMM_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/collective.h"
#include "device/threadpool.h"

typedef struct rf__job rf__job;

/* Whether this process runs under an MPI launcher (mpirun, mpiexec, srun:
 * their environment variables) or has MPI initialised. False without MPI. */
bool rf__job_launched(void);

/* This process's rank and size in MPI_COMM_WORLD, initialising MPI for
 * ringflow when nobody has (rf_job_tasks). FAILED_PRECONDITION when MPI
 * cannot be used (built without it, initialised with too low a thread level,
 * already finalised). */
rf_status *rf__job_world(int *task, int *num_tasks);

/* Makes the session's place in the job, collectively: duplicates the job's
 * communicator (mpi_comm: a pointer to an MPI_Comm, NULL for
 * MPI_COMM_WORLD) and exchanges every task's device counts. pool runs the
 * job's completions (not owned). DEADLINE_EXCEEDED when some process does
 * not come within timeout_ms. */
rf_status *rf__job_attach(const void *mpi_comm, int num_cpu, int num_gpu,
                          int64_t timeout_ms, rf__threadpool *pool,
                          rf__job **out);
/* Leaves the job (frees its communicators). No collective may be running. */
void rf__job_detach(rf__job *j);

int rf__job_task(const rf__job *j);
int rf__job_num_tasks(const rf__job *j);
/* Task t's device counts (as its session options gave them). */
void rf__job_devices(const rf__job *j, int t, int *num_cpu, int *num_gpu);

/* Runs a group whose participants in this process have all arrived and
 * agree (g->n of them; the others are in other processes): takes over the
 * inputs (g->p[i].input becomes NULL), checks agreement with the other
 * processes, moves the data and calls every participant's done once, from a
 * pool thread. Returns at once. group_devices: every participant's device
 * ("/task:0/cpu:0,/task:1/cpu:0"), job_step the step's number in the job. */
void rf__job_coll_run(rf__job *j, rf__coll_group *g, const char *group_devices,
                      int64_t job_step);

/* The participants in this process of (shared_name, job_step) failed before
 * their group could run (a local timeout, disagreement or cancellation):
 * tells the job, so every process fails that collective with `why`. */
void rf__job_coll_failed(rf__job *j, const char *shared_name, int64_t job_step,
                         const rf_status *why);

/* Step bookkeeping: a step of this process with its job step number. When
 * the step fails or is cancelled (rf__job_cancel_step, from the collective
 * manager), its collectives still waiting for other processes fail with
 * `why`, and the other processes fail that job step's collectives that
 * involve this task at once instead of waiting for their timeout. */
void rf__job_begin_step(rf__job *j, int64_t step_id, int64_t job_step);
void rf__job_cancel_step(rf__job *j, int64_t step_id, const rf_status *why);
void rf__job_end_step(rf__job *j, int64_t step_id);
/* A run failed before its step started (a bad feed, a compile error): the
 * other processes fail job step `job_step` at once. */
void rf__job_step_failed(rf__job *j, int64_t job_step, const rf_status *why);
/* Returns once every notification above that this process queued so far
 * was sent: a failed run returns after the other processes were told (the
 * messages are not left to a communication thread that may not run for a
 * while, and a caller's next steps are not charged with them). */
void rf__job_settle(rf__job *j);

#endif
