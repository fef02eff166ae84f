/* core/cuda_check.h - the one place CUDA error codes become rf_status
 * (NCCL's NCCLCHECK trail): RF_CUDA_CHECK returns from the enclosing function
 * with INTERNAL (RESOURCE_EXHAUSTED for cudaErrorMemoryAllocation) naming the
 * call, file and line. Never aborts. Only built with RF_HAVE_CUDA. */
#ifndef RF_CORE_CUDA_CHECK_H
#define RF_CORE_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "ringflow/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The status for err (cudaSuccess: NULL): "<expr> failed at file:line:
 * <cudaGetErrorName>: <cudaGetErrorString>". */
rf_status *rf__cuda_status(cudaError_t err, const char *expr, const char *file,
                           int line);

#ifdef __cplusplus
}
#endif

#define RF_CUDA_CHECK(expr)                                                  \
  do {                                                                       \
    cudaError_t rf__cuda_err_ = (expr);                                      \
    if (rf__cuda_err_ != cudaSuccess)                                        \
      return rf__cuda_status(rf__cuda_err_, #expr, __FILE__, __LINE__);      \
  } while (0)

#endif
