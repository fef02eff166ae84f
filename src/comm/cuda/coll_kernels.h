/* comm/cuda/coll_kernels.h - the CUDA kernels of the virtual-GPU collective
 * backend, callable from C. One launch reads n equally sized inputs and
 * writes up to 64 outputs: a reduction in rank order (input 0, then 1, ...;
 * the CPU backend's order and arithmetic, so every device and the CPU get the
 * same bits; float16/bfloat16 in float, rounded once), or a gather/copy.
 * Every pointer must be readable/writable from the launching GPU (the same
 * GPU, or a peer with access enabled). Only for CUDA builds. */
#ifndef RF_COMM_CUDA_COLL_KERNELS_H
#define RF_COMM_CUDA_COLL_KERNELS_H

#include <stdint.h>

#include "ringflow/dtype.h"
#include "ringflow/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_CUDA_COLL_MAX 64

typedef enum rf__cuda_coll_mode {
  /* out[j][i] = reduce_k in[k][i] for every j < num_outs (all-reduce: one
   * buffer per participant; reduce: the root's only) */
  RF_CUDA_COLL_REDUCE,
  /* rank r's out[r][i] = reduce_k in[k][r * count / n + i] */
  RF_CUDA_COLL_REDUCE_SCATTER,
  /* out[j][k * count + i] = in[k][i] for every j (all-gather; broadcast is
   * the gather of one input) */
  RF_CUDA_COLL_GATHER,
} rf__cuda_coll_mode;

typedef struct rf__cuda_coll_args {
  rf__cuda_coll_mode mode;
  rf_dtype dtype;
  int op; /* rf_reduction (comm/collective.h); unused by GATHER */
  int n;  /* inputs */
  int num_outs;
  int64_t count; /* elements per input */
  const void *in[RF_CUDA_COLL_MAX];
  void *out[RF_CUDA_COLL_MAX];
} rf__cuda_coll_args;

/* Enqueues the kernel on `stream` (a cudaStream_t of the current device);
 * multiprocessors sizes the grid. UNIMPLEMENTED for a (dtype, op) the CPU
 * backend does not reduce either; INTERNAL for a failed launch. */
rf_status *rf__cuda_coll_launch(const rf__cuda_coll_args *a, void *stream,
                                int multiprocessors);

#ifdef __cplusplus
}
#endif

#endif
