/* kernels/cpu/blas_threads.c - OpenBLAS runs single-threaded inside ringflow.
 * Devices already run side by side on the session's pool; OpenBLAS's own
 * spinning threads on top of that oversubscribe the cores (measured: 4
 * virtual devices on 2 cores trained 3x slower) and make results depend on
 * its thread count. RF_BLAS_THREADS=<n> overrides. */
#include <cblas.h>
#include <stdlib.h>

#include "kernels/kernel_families.h"

rf_status *rf__configure_blas(void) {
  const char *env = getenv("RF_BLAS_THREADS");
  int n = env ? atoi(env) : 1;
  openblas_set_num_threads(n > 0 ? n : 1);
  return NULL;
}
