/* kernels/cpu/math_kernels.c - registers the CPU kernels of the math family
 * (one registration function per file, see math_kernels.h). */
#include "kernels/cpu/math_kernels.h"

#include "kernels/fused_matmul.h"
#include "kernels/kernel_families.h"

rf_status *rf__register_cpu_math_kernels(void) {
  RF_CHECK(rf__register_cpu_binary_kernels());
  RF_CHECK(rf__register_cpu_nary_kernels());
  RF_CHECK(rf__register_cpu_matmul_kernels());
  RF_CHECK(rf__register_cpu_fused_matmul_kernels());
  RF_CHECK(rf__register_cpu_cast_kernels());
  RF_CHECK(rf__register_cpu_sum_to_shape_kernels());
  return NULL;
}
