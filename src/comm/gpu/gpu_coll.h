/* comm/gpu/gpu_coll.h - the GPU collective backends (CUDA builds only).
 * rf__gpu_coll_backend (comm/collective.h) picks one per group: participants
 * on ONE physical GPU (virtual GPU devices) or on GPUs that can reach each
 * other's memory run through CUDA kernels (comm/cuda/backend.c); participants
 * on DISTINCT physical GPUs run through NCCL when it is built
 * (comm/nccl/backend.c). Both complete in stream order, like the GPU
 * kernels of other ops: run() enqueues on the participants' streams and
 * calls every done with its output at once, since each output is written
 * before anything later on its device's stream runs (the CUDA-kernel path
 * makes every participant's stream wait for the kernel; NCCL writes each
 * rank's output on that rank's stream), and a value leaving the stream
 * (_Send, _Retval) waits for the stream first. A failure after the launch
 * fails the step: a faulting stream at its GPU sync, an NCCL error or
 * timeout through a step check (device/step.h). */
#ifndef RF_COMM_GPU_GPU_COLL_H
#define RF_COMM_GPU_GPU_COLL_H

#include "comm/collective.h"
#ifdef RF_HAVE_NCCL
#include <nccl.h>
#endif

/* The CUDA-kernel backend (any GPU participants whose memory the leader's
 * GPU can reach). */
void rf__cuda_coll_run(rf__coll_group *g);
#ifdef RF_HAVE_NCCL
/* The NCCL backend (participants on distinct physical GPUs). */
void rf__nccl_coll_run(rf__coll_group *g);
/* For tests on one GPU: when on, a group of ONE participant runs through
 * NCCL (a one-rank communicator) instead of CUDA kernels. Off by default. */
void rf__gpu_coll_nccl_for_single(bool on);
/* NCCL's type and operation for ours (uint8 and bool travel as bytes). */
ncclDataType_t rf__nccl_type(rf_dtype d);
ncclRedOp_t rf__nccl_red_op(rf_reduction r);
#endif

/* For the benchmark's comparison: when on, the GPU collectives call their
 * dones only once their work has run on the GPU (a completion -> pool task,
 * as they did before completing in stream order). Off by default. */
void rf__gpu_coll_wait_for_kernels(bool on);
/* Whether the dones fire at the launch (the default) or after the work. */
bool rf__gpu_coll_stream_ordered(void);

/* Releases the group's inputs, then calls every participant's done with a
 * copy of st (no output). */
void rf__gpu_coll_fail(rf__coll_group *g, const rf_status *st);
/* The checks both backends share: at most 64 participants, a reduction the
 * CPU backend supports too, inputs in device memory. NULL when fine. */
rf_status *rf__gpu_coll_check(const rf__coll_group *g);
/* The output shape of rank r (its expected shape for broadcast receivers is
 * the root's input shape). */
rf_shape rf__gpu_coll_out_shape(const rf__coll_group *g, int r);
/* Whether rank r receives an output. */
bool rf__gpu_coll_has_output(const rf__coll_group *g, int r);

#endif
