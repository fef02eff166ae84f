/* TEMPORARY: delete when the families land. Stand-ins for the op and kernel
 * family registration functions of ops/families.h, so the graph branch links
 * and its tests run before the op/kernel helpers' work is merged. */
#include <stddef.h>

#include "ops/families.h"

rf_status *rf__register_array_ops(void) { return NULL; }
rf_status *rf__register_state_ops(void) { return NULL; }
rf_status *rf__register_math_ops(void) { return NULL; }
rf_status *rf__register_nn_ops(void) { return NULL; }
rf_status *rf__register_reduction_ops(void) { return NULL; }
rf_status *rf__register_runtime_ops(void) { return NULL; }

rf_status *rf__register_cpu_array_kernels(void) { return NULL; }
rf_status *rf__register_cpu_state_kernels(void) { return NULL; }
rf_status *rf__register_cpu_math_kernels(void) { return NULL; }
rf_status *rf__register_cpu_nn_kernels(void) { return NULL; }
rf_status *rf__register_cpu_reduction_kernels(void) { return NULL; }
rf_status *rf__register_cpu_runtime_kernels(void) { return NULL; }
