/* core/cuda_check.c - see cuda_check.h. Empty without CUDA. */
#ifdef RF_HAVE_CUDA
#include "core/cuda_check.h"

#include "core/status.h"

rf_status *rf__cuda_status(cudaError_t err, const char *expr, const char *file,
                           int line) {
  if (err == cudaSuccess) return NULL;
  rf_code code = err == cudaErrorMemoryAllocation ? RF_RESOURCE_EXHAUSTED
                                                  : RF_INTERNAL;
  return rf__error(code, "%s failed at %s:%d: %s: %s", expr, file, line,
                   cudaGetErrorName(err), cudaGetErrorString(err));
}
#else
/* ISO C forbids an empty translation unit. */
typedef int rf__cuda_check_unused;
#endif
