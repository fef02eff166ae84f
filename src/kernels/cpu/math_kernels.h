/* kernels/cpu/math_kernels.h - the files of the CPU math kernel family and
 * what they share: each file registers its own kernels; math_kernels.c calls
 * them all from rf__register_cpu_math_kernels. */
#ifndef RF_KERNELS_CPU_MATH_KERNELS_H
#define RF_KERNELS_CPU_MATH_KERNELS_H

#include "kernels/cpu/half.h"
#include "kernels/kernel.h"

/* Vectorise these loops at -O2 as well: GCC 12's default "very cheap" cost
 * model skips every loop that needs a scalar epilogue, i.e. all of ours
 * (e.g. 0 of 149 loops in elementwise_binary.c at -O2, all of them with the
 * dynamic model). Applies to the rest of each file including this header. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

/* Add Sub Mul Div Equal _BroadcastToShapeOf */
rf_status *rf__register_cpu_binary_kernels(void);
rf_status *rf__register_cpu_nary_kernels(void);         /* Neg AddN */
rf_status *rf__register_cpu_matmul_kernels(void);       /* MatMul */
rf_status *rf__register_cpu_cast_kernels(void);         /* Cast */
rf_status *rf__register_cpu_sum_to_shape_kernels(void); /* _SumToShapeOf */

/* Elements per block for loops that accumulate in a wider type on the stack:
 * small enough for L1, large enough to vectorise. */
#define RF_MATH_BLOCK 256

#endif
