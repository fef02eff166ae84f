/* core/cuda_check.h - the one place CUDA runtime, cuBLAS and NCCL error codes
 * become rf_status (never an abort or a print): RF_CUDA_CHECK(expr) returns
 * from the enclosing function with a status naming the call, file and line;
 * RF_CUDA_STATUS(expr) evaluates to that status (NULL on success) for code
 * that cleans up first. cudaErrorMemoryAllocation (and the cuBLAS/NCCL
 * equivalents) map to RESOURCE_EXHAUSTED, everything else to INTERNAL.
 * Only for builds with RF_HAVE_CUDA; usable from C and from CUDA C++. */
#ifndef RF_CORE_CUDA_CHECK_H
#define RF_CORE_CUDA_CHECK_H

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#ifdef RF_HAVE_NCCL
#include <nccl.h>
#endif

#include "ringflow/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when e is cudaSuccess; else a new status "<expr> failed: <name>
 * (<description>) at <file>:<line>". Also clears the calling thread's
 * last-error state, so a later cudaGetLastError() after a kernel launch does
 * not report this older error again. */
rf_status *rf__cuda_status(cudaError_t e, const char *expr, const char *file,
                           int line);
/* The same for cuBLAS (CUBLAS_STATUS_ALLOC_FAILED: RESOURCE_EXHAUSTED). */
rf_status *rf__cublas_status(cublasStatus_t s, const char *expr,
                             const char *file, int line);
#ifdef RF_HAVE_NCCL
/* The same for NCCL (ncclSystemError / ncclInternalError: INTERNAL; a failed
 * allocation inside NCCL reports as ncclSystemError). */
rf_status *rf__nccl_status(ncclResult_t r, const char *expr, const char *file,
                           int line);
#endif

#ifdef __cplusplus
}
#endif

#define RF_CUDA_STATUS(expr) rf__cuda_status((expr), #expr, __FILE__, __LINE__)
#define RF_CUBLAS_STATUS(expr) \
  rf__cublas_status((expr), #expr, __FILE__, __LINE__)
#define RF_NCCL_STATUS(expr) rf__nccl_status((expr), #expr, __FILE__, __LINE__)

#define RF_CUDA_CHECK(expr)                                       \
  do {                                                            \
    cudaError_t rf__ce_ = (expr);                                 \
    if (rf__ce_ != cudaSuccess)                                   \
      return rf__cuda_status(rf__ce_, #expr, __FILE__, __LINE__); \
  } while (0)

#define RF_CUBLAS_CHECK(expr)                                       \
  do {                                                              \
    cublasStatus_t rf__bs_ = (expr);                                \
    if (rf__bs_ != CUBLAS_STATUS_SUCCESS)                           \
      return rf__cublas_status(rf__bs_, #expr, __FILE__, __LINE__); \
  } while (0)

#define RF_NCCL_CHECK(expr)                                       \
  do {                                                            \
    ncclResult_t rf__nr_ = (expr);                                \
    if (rf__nr_ != ncclSuccess)                                   \
      return rf__nccl_status(rf__nr_, #expr, __FILE__, __LINE__); \
  } while (0)

#endif
