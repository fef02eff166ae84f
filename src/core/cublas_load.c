/* core/cublas_load.c - cuBLAS and cuBLASLt loaded when first called, not
 * when ringflow is. The two libraries are 600 MB; mapping and relocating
 * them at start-up cost every process of a CUDA build 0.15-0.45 s and
 * 26,000 page faults (measured on the 2-core VM: `ringflow --help` 0.19 s
 * against 0.012 s without them), GPU or not. ringflow calls 19 of their
 * functions: each is defined here under its own name (hidden, like every
 * symbol of the library that is not RF_API) and forwards to the library,
 * which is opened (dlopen) at the first call, by its soname on the usual
 * search path, then in the directory the build found it in. If it cannot be
 * opened, or lacks a function, every call returns
 * CUBLAS_STATUS_NOT_INITIALIZED and rf__cublas_load_error() says why; the
 * first call is a GPU device's cublasCreate, whose status names it. */
#include "core/cublas_load.h"

#ifdef RF_HAVE_CUDA

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define BLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)
#define LT_SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

static struct {
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
  cublasStatus_t (*set_sm_count_target)(cublasHandle_t, int);
  const char *(*status_name)(cublasStatus_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t,
                            cublasOperation_t, int, int, int, const void *,
                            const void *, cudaDataType, int, const void *,
                            cudaDataType, int, const void *, void *,
                            cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  cublasStatus_t (*gemm_strided_batched_ex)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
      const void *, const void *, cudaDataType, int, long long int,
      const void *, cudaDataType, int, long long int, const void *, void *,
      cudaDataType, int, long long int, int, cublasComputeType_t,
      cublasGemmAlgo_t);
  cublasStatus_t (*lt_matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                              const void *, const void *,
                              cublasLtMatrixLayout_t, const void *,
                              cublasLtMatrixLayout_t, const void *,
                              const void *, cublasLtMatrixLayout_t, void *,
                              cublasLtMatrixLayout_t,
                              const cublasLtMatmulAlgo_t *, void *, size_t,
                              cudaStream_t);
  cublasStatus_t (*lt_algo_config_get)(const cublasLtMatmulAlgo_t *,
                                       cublasLtMatmulAlgoConfigAttributes_t,
                                       void *, size_t, size_t *);
  cublasStatus_t (*lt_algo_get_heuristic)(
      cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
      cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
      cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t[],
      int *);
  cublasStatus_t (*lt_desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t,
                                   cudaDataType_t);
  cublasStatus_t (*lt_desc_destroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*lt_desc_set)(cublasLtMatmulDesc_t,
                                cublasLtMatmulDescAttributes_t, const void *,
                                size_t);
  cublasStatus_t (*lt_pref_create)(cublasLtMatmulPreference_t *);
  cublasStatus_t (*lt_pref_destroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*lt_pref_set)(cublasLtMatmulPreference_t,
                                cublasLtMatmulPreferenceAttributes_t,
                                const void *, size_t);
  cublasStatus_t (*lt_layout_create)(cublasLtMatrixLayout_t *, cudaDataType,
                                     uint64_t, uint64_t, int64_t);
  cublasStatus_t (*lt_layout_destroy)(cublasLtMatrixLayout_t);
} fn;

/* Where each pointer above comes from: 0 libcublas, 1 libcublasLt. */
static const struct {
  int lib;
  const char *name;
  void *slot; /* &fn.<member>: a pointer to a function pointer */
} table[] = {
    {0, "cublasCreate_v2", &fn.create},
    {0, "cublasDestroy_v2", &fn.destroy},
    {0, "cublasSetStream_v2", &fn.set_stream},
    {0, "cublasSetWorkspace_v2", &fn.set_workspace},
    {0, "cublasSetSmCountTarget", &fn.set_sm_count_target},
    {0, "cublasGetStatusName", &fn.status_name},
    {0, "cublasGemmEx", &fn.gemm_ex},
    {0, "cublasGemmStridedBatchedEx", &fn.gemm_strided_batched_ex},
    {1, "cublasLtMatmul", &fn.lt_matmul},
    {1, "cublasLtMatmulAlgoConfigGetAttribute", &fn.lt_algo_config_get},
    {1, "cublasLtMatmulAlgoGetHeuristic", &fn.lt_algo_get_heuristic},
    {1, "cublasLtMatmulDescCreate", &fn.lt_desc_create},
    {1, "cublasLtMatmulDescDestroy", &fn.lt_desc_destroy},
    {1, "cublasLtMatmulDescSetAttribute", &fn.lt_desc_set},
    {1, "cublasLtMatmulPreferenceCreate", &fn.lt_pref_create},
    {1, "cublasLtMatmulPreferenceDestroy", &fn.lt_pref_destroy},
    {1, "cublasLtMatmulPreferenceSetAttribute", &fn.lt_pref_set},
    {1, "cublasLtMatrixLayoutCreate", &fn.lt_layout_create},
    {1, "cublasLtMatrixLayoutDestroy", &fn.lt_layout_destroy},
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded;
static char load_error[640];
static const char *lib_names[2] = {BLAS_SONAME, LT_SONAME};

void rf__cublas_load_names(const char *blas, const char *lt) {
  lib_names[0] = blas;
  lib_names[1] = lt;
}

/* By name on the search path (LD_LIBRARY_PATH, the cache), then where the
 * build found it (RF_CUBLAS_DIR). The first failure's dlerror is kept. */
static void *open_lib(const char *name) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h) return h;
  snprintf(load_error, sizeof load_error, "%.100s could not be loaded (%.400s)",
           name, dlerror());
#ifdef RF_CUBLAS_DIR
  if (!strchr(name, '/')) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", RF_CUBLAS_DIR, name);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) load_error[0] = '\0';
  }
#endif
  return h;
}

static void load(void) {
  void *libs[2] = {open_lib(lib_names[0]), NULL};
  if (libs[0]) libs[1] = open_lib(lib_names[1]);
  if (!libs[0] || !libs[1]) return;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
    void *p = dlsym(libs[table[i].lib], table[i].name);
    if (!p) {
      snprintf(load_error, sizeof load_error, "%.100s has no %s",
               lib_names[table[i].lib], table[i].name);
      return;
    }
    memcpy(table[i].slot, &p, sizeof p);
  }
  loaded = true; /* the libraries stay open for the process's life */
}

static bool ready(void) {
  pthread_once(&once, load);
  return loaded;
}

const char *rf__cublas_load_error(void) {
  pthread_once(&once, load);
  return loaded ? NULL : load_error;
}

#define NOT_LOADED CUBLAS_STATUS_NOT_INITIALIZED

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  return ready() ? fn.create(handle) : NOT_LOADED;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  return ready() ? fn.destroy(handle) : NOT_LOADED;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t s) {
  return ready() ? fn.set_stream(handle, s) : NOT_LOADED;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t bytes) {
  return ready() ? fn.set_workspace(handle, workspace, bytes) : NOT_LOADED;
}
cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int target) {
  return ready() ? fn.set_sm_count_target(handle, target) : NOT_LOADED;
}
const char *cublasGetStatusName(cublasStatus_t status) {
  return ready() ? fn.status_name(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A,
                            cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return ready()
             ? fn.gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                          B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo)
             : NOT_LOADED;
}
cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
    long long int strideB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return ready() ? fn.gemm_strided_batched_ex(
                       handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                       strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc,
                       strideC, batchCount, computeType, algo)
                 : NOT_LOADED;
}
cublasStatus_t cublasLtMatmul(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
    const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
    const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
    const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
    void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  return ready() ? fn.lt_matmul(lightHandle, computeDesc, alpha, A, Adesc, B,
                                Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                                workspace, workspaceSizeInBytes, stream)
                 : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr,
    void *buf, size_t sizeInBytes, size_t *sizeWritten) {
  return ready()
             ? fn.lt_algo_config_get(algo, attr, buf, sizeInBytes, sizeWritten)
             : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int *returnAlgoCount) {
  return ready() ? fn.lt_algo_get_heuristic(
                       lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc,
                       preference, requestedAlgoCount, heuristicResultsArray,
                       returnAlgoCount)
                 : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  return ready() ? fn.lt_desc_create(matmulDesc, computeType, scaleType)
                 : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return ready() ? fn.lt_desc_destroy(matmulDesc) : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(
    cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
    const void *buf, size_t sizeInBytes) {
  return ready() ? fn.lt_desc_set(matmulDesc, attr, buf, sizeInBytes)
                 : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(
    cublasLtMatmulPreference_t *pref) {
  return ready() ? fn.lt_pref_create(pref) : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(
    cublasLtMatmulPreference_t pref) {
  return ready() ? fn.lt_pref_destroy(pref) : NOT_LOADED;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
    const void *buf, size_t sizeInBytes) {
  return ready() ? fn.lt_pref_set(pref, attr, buf, sizeInBytes) : NOT_LOADED;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  return ready() ? fn.lt_layout_create(matLayout, type, rows, cols, ld)
                 : NOT_LOADED;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return ready() ? fn.lt_layout_destroy(matLayout) : NOT_LOADED;
}

#endif /* RF_HAVE_CUDA */
