/* runtime/registry_init.c - the composition root: fills the op, kernel and
 * pass tables once, on first use, from the top of the stack (a lower layer
 * never registers a higher one). The tables are read-only afterwards, so
 * lookups need no lock. */
#include "core/once.h"
#include "kernels/fused_conv.h"
#include "kernels/kernel_families.h"
#include "ops/op_families.h"
#include "passes/pass_registry.h"
#include "runtime/families.h"

static const rf__init_fn families[] = {
    rf__ops_init,
    rf__register_cpu_array_kernels,
    rf__register_cpu_state_kernels,
    rf__register_cpu_math_kernels,
    rf__register_cpu_nn_kernels,
    rf__register_cpu_reduction_kernels,
    rf__register_cpu_runtime_kernels,
    rf__register_cpu_collective_kernels,
    /* conv */
    rf__register_cpu_conv_kernels,
    rf__register_cpu_fused_conv_kernels,
    rf__register_cpu_pool_kernels,
    rf__register_cpu_bucket_kernels,
    rf__register_cpu_shape_kernels,
    rf__register_cpu_index_kernels,
    rf__register_cpu_linalg_kernels,
    rf__register_cpu_gelu_kernels,
    rf__register_cpu_dropout_kernels,
    rf__register_cpu_layer_norm_kernels,
    rf__register_cpu_batch_norm_kernels,
#ifdef RF_HAVE_CUDA
    rf__register_gpu_bucket_kernels,
    rf__register_gpu_runtime_kernels,
    rf__register_gpu_collective_kernels,
    rf__register_gpu_array_kernels,
    rf__register_gpu_state_kernels,
    rf__register_gpu_math_kernels,
    rf__register_gpu_nn_kernels,
    rf__register_gpu_reduction_kernels,
    /* conv */
    rf__register_gpu_conv_kernels,
    rf__register_gpu_pool_kernels,
    rf__register_gpu_shape_kernels,
    rf__register_gpu_index_kernels,
    rf__register_gpu_linalg_kernels,
    rf__register_gpu_gelu_kernels,
    rf__register_gpu_dropout_kernels,
    rf__register_gpu_layer_norm_kernels,
    rf__register_gpu_batch_norm_kernels,
#endif
    rf__register_passes,
    rf__configure_blas,
};

rf_status *rf__registry_init(void) {
  static rf__once once = RF_ONCE_INIT;
  return rf__once_run(&once, families, sizeof families / sizeof families[0]);
}
