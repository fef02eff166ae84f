/* kernels/cpu/nn_kernels.h - the nn kernel family is split over two files;
 * rf__register_cpu_nn_kernels (kernels/kernel_families.h) registers both
 * halves. */
#ifndef RF_KERNELS_CPU_NN_KERNELS_H
#define RF_KERNELS_CPU_NN_KERNELS_H

#include "ringflow/status.h"

/* Vectorise the including file's loops at -O2 as well: GCC 12's default
 * "very cheap" cost model skips every loop that needs a scalar epilogue
 * (the math kernels do the same in math_kernels.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

/* Relu, Sigmoid, Tanh and their gradients (activation_kernels.c). */
rf_status *rf__register_cpu_activation_kernels(void);

#endif
