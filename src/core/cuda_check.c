/* core/cuda_check.c - CUDA, cuBLAS and NCCL error codes to rf_status (see
 * core/cuda_check.h). Compiled to nothing without RF_HAVE_CUDA. */
#ifdef RF_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cublas_load.h"

#include <string.h>

#include "core/status.h"

/* Only the file's base name: messages stay short and build-path free. */
static const char *base_name(const char *file) {
  const char *s = strrchr(file, '/');
  return s ? s + 1 : file;
}

rf_status *rf__cuda_status(cudaError_t e, const char *expr, const char *file,
                           int line) {
  if (e == cudaSuccess) return NULL;
  (void)cudaGetLastError(); /* clear this thread's last error (see header) */
  rf_code code =
      e == cudaErrorMemoryAllocation ? RF_RESOURCE_EXHAUSTED : RF_INTERNAL;
  return rf__error(code, "%s failed: %s (%s) at %s:%d", expr,
                   cudaGetErrorName(e), cudaGetErrorString(e), base_name(file),
                   line);
}

static const char *cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

rf_status *rf__cublas_status(cublasStatus_t s, const char *expr,
                             const char *file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return NULL;
  const char *unloaded =
      s == CUBLAS_STATUS_NOT_INITIALIZED ? rf__cublas_load_error() : NULL;
  if (unloaded) /* the library, not the call */
    return rf__error(RF_UNAVAILABLE, "%s failed: cuBLAS: %s at %s:%d", expr,
                     unloaded, base_name(file), line);
  rf_code code =
      s == CUBLAS_STATUS_ALLOC_FAILED ? RF_RESOURCE_EXHAUSTED : RF_INTERNAL;
  return rf__error(code, "%s failed: %s (%d) at %s:%d", expr, cublas_name(s),
                   (int)s, base_name(file), line);
}

#ifdef RF_HAVE_NCCL
rf_status *rf__nccl_status(ncclResult_t r, const char *expr, const char *file,
                           int line) {
  if (r == ncclSuccess) return NULL;
  return rf__error(RF_INTERNAL, "%s failed: %s (%d) at %s:%d", expr,
                   ncclGetErrorString(r), (int)r, base_name(file), line);
}
#endif

#endif /* RF_HAVE_CUDA */
