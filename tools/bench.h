/* tools/bench.h - what the parts of `ringflow bench` share: the collectives,
 * one measured row, and the measurements (ringflow sessions on CPU devices in
 * bench_run.c, the memory floor in bench_floor.c, the OpenMPI baseline in
 * bench_mpi.c, GPU devices in bench_gpu*.c). Sizes follow nccl-tests: the
 * per-rank buffer, the OUTPUT for all-gather and the INPUT for
 * reduce-scatter. */
#ifndef RF_TOOLS_BENCH_H
#define RF_TOOLS_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "devices.h"
#include "ringflow/ringflow.h"

typedef enum bench_coll {
  BC_ALL_REDUCE,
  BC_REDUCE,
  BC_BROADCAST,
  BC_ALL_GATHER,
  BC_REDUCE_SCATTER,
  BC_COUNT
} bench_coll;

#define BENCH_MAX_SIZES 40

/* One measurement; valid false when it was not (or could not be) taken. */
typedef struct bench_row {
  bool valid;
  double bytes; /* as nccl-tests counts them (after rounding to n slices) */
  int iters;
  double time_us, algbw, busbw; /* busbw = algbw * bench_bus_factor */
} bench_row;

/* Collective names as printed ("all_reduce", ...), and back (BC_COUNT if
 * unknown). */
const char *bench_coll_name(bench_coll c);
/* nccl-tests' bus bandwidth factor: 2(n-1)/n, (n-1)/n or 1. */
double bench_bus_factor(bench_coll c, int n);
/* The bytes nccl-tests counts for a nominal size: all-gather and
 * reduce-scatter round down to n equal float slices (0: too small). */
double bench_counted_bytes(bench_coll c, int n, int64_t nominal);
/* Element k of output f when input i holds (k + i) % 7 (i: the device's
 * rank; broadcast: the root's input, i = 0): small integers, so float sums
 * are exact. */
double bench_expected(bench_coll c, int n, int64_t in_count, int f, int64_t k);
/* Fills time, algbw and busbw of a row from seconds per op. */
void bench_row_set(bench_row *r, bench_coll c, int n, double bytes, int iters,
                   double seconds);

/* Times one collective through the public API on the CPU devices d (rank i
 * on d->name[i]; threads: the session's pool size, 0 = one a core) for at
 * least min_time seconds. *fresh_bytes gets how many bytes the default
 * allocator had to take from the system during the timed runs (0 when it
 * reused its cache). */
rf_status *bench_ringflow(bench_coll c, const tool_devices *d, int threads,
                          int64_t bytes, double min_time, bench_row *out,
                          int64_t *fresh_bytes);

/* The memory floor on 2 threads: seconds per op of a plain copy of `bytes`
 * and of a plain sum of n buffers of `bytes` into one, each op ending at a
 * barrier of the two threads. The buffers are allocated and touched once, at
 * max_bytes. */
typedef struct bench_floor bench_floor;
rf_status *bench_floor_new(int n, int64_t max_bytes, bench_floor **out);
void bench_floor_measure(bench_floor *f, int64_t bytes, double min_time,
                         double *copy_s, double *sum_s);
void bench_floor_free(bench_floor *f);

/* The OpenMPI baseline: runs the ringflow-mpi-baseline program under mpirun
 * with n ranks (mmap_threshold: with MALLOC_MMAP_THRESHOLD_=1073741824) and
 * fills rows[c][size index] from its CSV. Returns NULL when the run worked;
 * otherwise a message (static or in `why`, size why_len) saying why not. */
typedef struct bench_mpi_args {
  const char *program; /* the baseline program */
  int n;
  const int64_t *sizes; /* nominal sizes, ascending */
  int nsizes;
  int factor; /* sizes[i + 1] = sizes[i] * factor */
  double min_time;
  bool mmap_threshold;
} bench_mpi_args;
const char *bench_mpi_run(const bench_mpi_args *a,
                          bench_row (*rows)[BENCH_MAX_SIZES], char *command,
                          size_t command_len, char *why, size_t why_len);
/* The baseline program's path, or NULL with *why set when there is none. */
const char *bench_mpi_find(const char *given, const char **why);

/* ---- GPU devices (bench_gpu.c; CUDA builds) ---- */

typedef enum bench_gpu_backend {
  BG_AUTO, /* what the runtime picks: NCCL for distinct GPUs, else CUDA */
  BG_CUDA, /* the CUDA-kernel backend (devices sharing GPUs) */
  BG_NCCL, /* NCCL; with one device, a one-rank communicator */
} bench_gpu_backend;

typedef struct bench_gpu_opts {
  const tool_devices *devices; /* GPU devices; rank i on devices->name[i] */
  int threads;                 /* the session's pool; 0: one a core */
  bench_gpu_backend backend;
  const int64_t *sizes; /* nominal sizes, ascending */
  int nsizes;
  double min_time;
  int only; /* a bench_coll, or -1 for all */
  bool csv;
  bool collectives; /* the collective tables */
  bool executor;    /* the executor-overhead table */
  /* Non-NULL: one traced session step per collective at the smallest and
   * largest size, to <trace_prefix>_<collective>_<bytes>.json. */
  const char *trace_prefix;
  int per_step; /* collectives per session step (and raw calls per wait) */
  /* Session steps per rf_session_sync in the pipelined columns (steps that
   * return once enqueued), against as many raw calls per wait; 0: none. */
  int pipeline;
} bench_gpu_opts;

/* Runs and prints the GPU benchmarks: every collective through a session
 * against the raw backend call on the same buffers and streams, and the
 * executor's cost per GPU node against calling the same kernel directly.
 * Returns the command's exit code (1 with a message when there is no GPU or
 * the build has no CUDA). */
int bench_gpu_main(const bench_gpu_opts *o);

/* ---- across processes (bench_job.c; MPI builds) ---- */

/* mpirun -np N ringflow bench: each collective across the job's processes
 * (--devices each) against plain MPI and Gloo, interleaved rounds, medians. */
typedef struct bench_job_args {
  const tool_devices *devices; /* CPU devices of each process */
  int threads, only, rounds;   /* only: a bench_coll, or -1 */
  int factor;                  /* sizes lo, lo * factor, ... hi */
  int64_t lo, hi;
  double min_time;
  bool csv, no_gloo;
} bench_job_args;
int bench_job(const bench_job_args *a);

/* The Gloo baseline (bench_gloo.cc, when Gloo is built): a context of
 * `size` processes over loopback TCP, meeting through files in `dir`. false
 * (with why) when it cannot be made, or without Gloo. */
typedef struct bench_gloo bench_gloo;
bool bench_gloo_new(int rank, int size, const char *dir, bench_gloo **out,
                    char *why, size_t why_len);
/* out = sum over processes of in (count floats); false on a Gloo error. */
bool bench_gloo_allreduce(bench_gloo *g, const float *in, float *out,
                          int64_t count);
void bench_gloo_free(bench_gloo *g);

#endif
