/* tools/bench_gpu.h - the parts of the GPU benchmark of `ringflow bench`
 * (CUDA builds only): bench_gpu_coll.c sets up one collective at one size on
 * the --devices (rank i on gpu:index[i]) and makes its two calls (a session
 * step, and the raw backend call on the same input buffers and streams),
 * bench_gpu_exec.c times a chain of GPU kernels through a session and directly,
 * bench_gpu.c times, checks and prints. Inputs live on the GPUs before timing
 * starts: nothing is copied between host and device in a timed call. */
#ifndef RF_TOOLS_BENCH_GPU_H
#define RF_TOOLS_BENCH_GPU_H

#include "bench.h"

#define BG_MAX_DEV 64
#define BG_MAX_PER_STEP 64
#define BG_MAX_OUT (BG_MAX_DEV * BG_MAX_PER_STEP) /* targets of one step */

/* What every measurement of one run shares. */
typedef struct bench_gpu_env {
  int n, threads;
  int index[BG_MAX_DEV];    /* rank i runs on gpu:index[i] */
  int count;                /* the session's GPU devices: gpu:0..count-1 */
  bool nccl;                /* collectives go through NCCL (else CUDA) */
  int ordinals[BG_MAX_DEV]; /* the physical GPU of rank i */
  void *comms[BG_MAX_DEV];  /* ncclComm_t of the raw calls (NCCL only) */
  int64_t timeout_ms;       /* the sessions' collective timeout */
  int per_step;             /* collectives per session step */
  int pipeline;             /* steps per wait when pipelined; 0: none */
} bench_gpu_env;

/* ---- one collective at one size (bench_gpu_coll.c) ---- */

typedef struct bench_gpu_coll bench_gpu_coll;

/* Builds a graph where each device's input is a Variable (set once, on its
 * GPU, by an init step: rank i holds i + 1 everywhere) read by ReadVariable
 * into the collective; a session over env's devices; and the raw call's output
 * buffers. *out is NULL (and NULL returned) when `bytes` is too small to
 * split over n ranks. */
rf_status *bench_gpu_coll_new(const bench_gpu_env *env, bench_coll c,
                              int64_t bytes, bench_gpu_coll **out);
/* One session step: the K collectives on every device, their results
 * consumed on the devices (targets, nothing fetched); the step returns once
 * every device's stream has finished. `coll` is a bench_gpu_coll. */
rf_status *bench_gpu_coll_step(void *coll);
/* The same step with rf__gpu_coll_wait_for_kernels on: each collective's
 * dones wait for its kernel (the completion thread, then a pool task), as
 * before the GPU collectives completed in stream order. */
rf_status *bench_gpu_coll_step_waiting(void *coll);
/* K raw calls on the same inputs and streams, then one wait: the backend's
 * kernel entry (rf__cuda_coll_launch) on the leader's stream, or one
 * ncclGroupStart/End over every rank, per call. */
rf_status *bench_gpu_coll_raw(void *coll);
/* `pipeline` session steps back to back with gpu_sync_on_finish off (each
 * returns once its work is enqueued), then one rf_session_sync; and
 * `pipeline` times the K raw calls back to back, then one wait (as
 * nccl-tests times its iterations). */
rf_status *bench_gpu_coll_pipe(void *coll);
rf_status *bench_gpu_coll_pipe_raw(void *coll);
/* The same raw calls, each with the CUDA-kernel backend's cross-stream
 * waits around it (every other device's stream records an event the
 * leader waits for; after the kernel they wait for the leader's): what the
 * virtual devices' streams cost the GPU by themselves. NCCL: as
 * bench_gpu_coll_pipe_raw. */
rf_status *bench_gpu_coll_pipe_raw_events(void *coll);
/* The session step without the collective: each input's ReadVariable as
 * the target (what a step costs around the collective). */
rf_status *bench_gpu_coll_base(void *coll);
/* One session step, traced (Chrome trace JSON at path). */
rf_status *bench_gpu_coll_trace(bench_gpu_coll *c, const char *path);
/* Blocks the devices' caching allocators have taken from cudaMalloc so far
 * (sessions of one collective and size only). */
void bench_gpu_coll_fresh(const bench_gpu_coll *c, int64_t *blocks);
/* Checks three elements of every output of the raw call and, when they are
 * at most 256 MiB together (fetching copies them to the host), of every
 * output of a session step; `pipelined`: that step is fetched with
 * gpu_sync_on_finish off, after `pipeline` pipelined steps, and
 * rf_session_sync is called after it. */
rf_status *bench_gpu_coll_check(bench_gpu_coll *c, bool pipelined);
/* The bytes the collective must move through device memory at least: every
 * input read once and every output written once. */
double bench_gpu_coll_traffic(const bench_gpu_coll *c);
/* NULL is ignored. */
void bench_gpu_coll_free(bench_gpu_coll *c);

/* ---- executor overhead (bench_gpu_exec.c) ---- */

typedef struct bench_gpu_exec_row {
  int nodes;        /* Add kernels in the chain */
  double session_s; /* seconds per session step */
  double direct_s;  /* seconds per direct loop (launches + one wait) */
  int session_iters, direct_iters;
} bench_gpu_exec_row;

#define BG_EXEC_ROWS 4

/* Times chains of 1, 10, 100 and 1000 Add kernels (float32[4]) on the first
 * device (gpu:index[0]): through a session, and as the GPU Add kernel's
 * compute function called in a loop on its stream followed by one
 * cudaStreamSynchronize. */
rf_status *bench_gpu_executor(const bench_gpu_env *env, double min_time,
                              bench_gpu_exec_row rows[BG_EXEC_ROWS]);

/* ---- timing (bench_gpu.c) ---- */

/* Seconds per call of each of n functions on one argument: warm-up calls,
 * then batches sized to last min_time / 5 each, five rounds in which the
 * functions take turns (drift hits all alike); the medians. iters: calls
 * per batch. */
#define BG_MAX_FNS 7
rf_status *bench_gpu_time(rf_status *(*const *fns)(void *), int n, void *arg,
                          double min_time, double *seconds, int *iters);

#endif
