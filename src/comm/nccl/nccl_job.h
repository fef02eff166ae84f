/* comm/nccl/nccl_job.h - collectives of GPU participants across the
 * processes of an MPI job (builds with CUDA, NCCL and MPI). comm/mpi/ agrees
 * on them and orders them like any other collective; this moves the data.
 * Every GPU participant of the job is one NCCL rank, in the job's rank order
 * (task, then device index), so NCCL itself routes over NVLink, PCIe and the
 * network. Each participant set gets its communicators once: the set's
 * first task makes the unique id, MPI broadcasts it (in GO order), every
 * process initialises its own ranks without blocking (polled against the
 * deadline). NCCL cannot put two ranks on one physical GPU: participants of
 * one process sharing a GPU are an error naming them. */
#ifndef RF_COMM_NCCL_NCCL_JOB_H
#define RF_COMM_NCCL_NCCL_JOB_H

#include <stdbool.h>

#include "comm/collective.h"

#define RF_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct rf__nccl_job_comm rf__nccl_job_comm;

/* A new unique id into id[RF_NCCL_ID_BYTES] (the set's first task). */
rf_status *rf__nccl_job_unique_id(void *id);

/* Starts making this process's n ranks of a communicator of nranks:
 * ranks[i] on devs[i] (distinct physical GPUs, else UNIMPLEMENTED naming
 * them). Nonblocking: poll until *ready. */
rf_status *rf__nccl_job_comm_start(int nranks, const void *id, int n,
                                   const int *ranks, rf__device *const *devs,
                                   rf__nccl_job_comm **out);
rf_status *rf__nccl_job_comm_poll(rf__nccl_job_comm *c, bool *ready);
/* Aborts the communicators (a collective did not finish): everything
 * queued on them ends; the set cannot be used again. Any thread. */
void rf__nccl_job_comm_abort(rf__nccl_job_comm *c);
/* Drops the set's reference: the communicators are destroyed now, or
 * after the completion of the last launch still in flight. */
void rf__nccl_job_comm_free(rf__nccl_job_comm *c);

/* The output shape of a participant of g whose group has num_devices
 * participants in all (a broadcast receiver's: root_shape). */
rf_shape rf__nccl_job_out_shape(const rf__coll_group *g, int num_devices,
                                const rf_shape *root_shape);

/* Launches g's collective on this process's participants in one NCCL group,
 * on their streams: inputs g->p[i].input, outputs outs[i] (device tensors;
 * NULL where a participant gets none), root_rank the root's rank in the
 * job (reduce, broadcast). done(arg, st) is called once, from a pool task
 * (the GPU runtime's completion, rf__gpu_notify_when_done), when every
 * stream ran it (st: a stream or NCCL error, ABORTED when the communicators
 * were aborted meanwhile, or NULL). A nonblocking communicator may still be
 * putting the launch on the streams when ncclGroupEnd returns: the call
 * polls until it has, for at most timeout_ms (then DEADLINE_EXCEEDED, and
 * the communicators are aborted). On error done is never called and the
 * streams are waited for. */
rf_status *rf__nccl_job_launch(rf__nccl_job_comm *c, const rf__coll_group *g,
                               int num_devices, int root_rank,
                               const rf_shape *root_shape,
                               rf_tensor *const *outs, int64_t timeout_ms,
                               void (*done)(void *arg, rf_status *st),
                               void *arg);

#endif
