/* kernels/cpu/nn_kernels.h - the nn kernel family is split over two files;
 * rf__register_cpu_nn_kernels (ops/families.h) registers both halves. */
#ifndef RF_KERNELS_CPU_NN_KERNELS_H
#define RF_KERNELS_CPU_NN_KERNELS_H

#include "ringflow/status.h"

/* Relu, Sigmoid, Tanh and their gradients (activation_kernels.c). */
rf_status *rf__register_cpu_activation_kernels(void);

#endif
