/* runtime/env_knobs.h - the environment variables that switch the library's
 * passes and CPU kernels (for measuring), checked where a session is made.
 * The layers that read them (kernels, passes) only compare against the
 * accepted words; a typo such as RF_FOLD_CONSTANTS=off would otherwise leave
 * the default on without a word. */
#ifndef RF_RUNTIME_ENV_KNOBS_H
#define RF_RUNTIME_ENV_KNOBS_H

#include "core/status.h"

/* INVALID_ARGUMENT naming the first of RF_BLAS_THREADS, RF_CPU_CONV,
 * RF_CUBLASLT_EPILOGUES, RF_CUBLASLT_SPLITK, RF_CUDNN_LAYOUT,
 * RF_FLUSH_DENORMALS, RF_FOLD_CONSTANTS, RF_FUSE_XENT_GRAD and
 * RF_SINGLE_COLLECTIVES whose value is not one docs/ARCHITECTURE.md
 * ("Environment variables") accepts; NULL when all are unset, empty or
 * accepted. */
rf_status *rf__env_knobs_check(void);

#endif
