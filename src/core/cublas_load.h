/* core/cublas_load.h - cuBLAS and cuBLASLt opened at their first call
 * (core/cublas_load.c defines the functions ringflow calls, under their own
 * names, and forwards them). Only in builds with RF_HAVE_CUDA. */
#ifndef RF_CORE_CUBLAS_LOAD_H
#define RF_CORE_CUBLAS_LOAD_H

#ifdef __cplusplus
extern "C" {
#endif

/* NULL once the libraries are open (this opens them if no call has); else
 * why they could not be ("libcublas.so.13 could not be loaded (...)"). Every
 * forwarded call then returns CUBLAS_STATUS_NOT_INITIALIZED. */
const char *rf__cublas_load_error(void);

/* Tests: open these files instead (before any call; names with a '/' are
 * not looked for elsewhere). */
void rf__cublas_load_names(const char *blas, const char *lt);

#ifdef __cplusplus
}
#endif

#endif
