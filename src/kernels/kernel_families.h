/* kernels/kernel_families.h - the registration function of each kernel
 * family; the composition root (runtime/registry_init.c) calls them once. */
#ifndef RF_KERNELS_KERNEL_FAMILIES_H
#define RF_KERNELS_KERNEL_FAMILIES_H

#include "ringflow/status.h"

/* CPU kernels (src/kernels/cpu/<family>.c). */
rf_status *rf__register_cpu_array_kernels(void);
rf_status *rf__register_cpu_state_kernels(void);
rf_status *rf__register_cpu_math_kernels(void);
rf_status *rf__register_cpu_nn_kernels(void);
rf_status *rf__register_cpu_reduction_kernels(void);
rf_status *rf__register_cpu_runtime_kernels(void);
rf_status *rf__register_cpu_collective_kernels(void);
/* _BucketPack/_BucketUnpack, CPU and GPU (kernels/cpu/bucket_kernels.c). */
rf_status *rf__register_cpu_bucket_kernels(void);
#ifdef RF_HAVE_CUDA
rf_status *rf__register_gpu_bucket_kernels(void);
#endif

/* conv family: src/kernels/cpu/{conv,pool}.c */
rf_status *rf__register_cpu_conv_kernels(void);
rf_status *rf__register_cpu_pool_kernels(void);
rf_status *rf__register_cpu_shape_kernels(void);      /* shape_kernels.c */
rf_status *rf__register_cpu_index_kernels(void);      /* index_kernels.c */
rf_status *rf__register_cpu_linalg_kernels(void);     /* batch_matmul.c */
rf_status *rf__register_cpu_gelu_kernels(void);       /* gelu.c */
rf_status *rf__register_cpu_dropout_kernels(void);    /* dropout.c */
rf_status *rf__register_cpu_layer_norm_kernels(void); /* layer_norm.c */
rf_status *rf__register_cpu_batch_norm_kernels(void); /* batch_norm.c */

#ifdef RF_HAVE_CUDA
/* src/kernels/cpu/collective_kernels.c: the CPU participants, for GPUs */
rf_status *rf__register_gpu_collective_kernels(void);
/* GPU kernels (CUDA builds only): src/kernels/cuda/<family>.cu */
rf_status *rf__register_gpu_array_kernels(void);
rf_status *rf__register_gpu_state_kernels(void);
rf_status *rf__register_gpu_math_kernels(void);
rf_status *rf__register_gpu_nn_kernels(void);
rf_status *rf__register_gpu_reduction_kernels(void);
/* conv family: src/kernels/cuda/{conv,pool}.cu */
rf_status *rf__register_gpu_conv_kernels(void);
rf_status *rf__register_gpu_pool_kernels(void);
rf_status *rf__register_gpu_shape_kernels(void);      /* shape_kernels.cu */
rf_status *rf__register_gpu_index_kernels(void);      /* index_kernels.cu */
rf_status *rf__register_gpu_linalg_kernels(void);     /* batch_matmul.cu */
rf_status *rf__register_gpu_gelu_kernels(void);       /* gelu.cu */
rf_status *rf__register_gpu_dropout_kernels(void);    /* dropout.cu */
rf_status *rf__register_gpu_layer_norm_kernels(void); /* layer_norm.cu */
rf_status *rf__register_gpu_batch_norm_kernels(void); /* batch_norm.cu */
#endif

/* BLAS threading (src/kernels/cpu/blas_threads.c). */
rf_status *rf__configure_blas(void);

#endif
