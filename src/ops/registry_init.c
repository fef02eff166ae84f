/* ops/registry_init.c - fills the op and kernel tables once, on first use.
 * The tables are read-only afterwards, so lookups need no lock. */
#include <pthread.h>

#include "ops/families.h"
#include "ops/op_registry.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static rf_status *init_status;

static rf_status *(*const families[])(void) = {
    rf__register_array_ops,
    rf__register_state_ops,
    rf__register_math_ops,
    rf__register_nn_ops,
    rf__register_reduction_ops,
    rf__register_runtime_ops,
    rf__register_collective_ops,
    rf__register_cpu_array_kernels,
    rf__register_cpu_state_kernels,
    rf__register_cpu_math_kernels,
    rf__register_cpu_nn_kernels,
    rf__register_cpu_reduction_kernels,
    rf__register_cpu_runtime_kernels,
    rf__register_cpu_collective_kernels,
#ifdef RF_HAVE_CUDA
    rf__register_gpu_runtime_kernels,
    rf__register_gpu_collective_kernels,
    rf__register_gpu_array_kernels,
    rf__register_gpu_state_kernels,
    rf__register_gpu_math_kernels,
    rf__register_gpu_nn_kernels,
    rf__register_gpu_reduction_kernels,
#endif
    rf__register_passes,
    rf__configure_blas,
};

static void init_once(void) {
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
    init_status = families[i]();
    if (init_status) return;
  }
}

rf_status *rf__registry_init(void) {
  pthread_once(&once, init_once);
  if (!init_status) return NULL;
  /* Hand out a copy: the caller frees what it gets. */
  return rf__status_copy(init_status);
}
