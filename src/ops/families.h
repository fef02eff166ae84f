/* ops/families.h - the registration function of each op family and each
 * kernel family. rf__registry_init calls them in this order; adding a family
 * adds one line here and one in registry_init.c (a static library would drop
 * self-registering objects, so the list is explicit). */
#ifndef RF_OPS_FAMILIES_H
#define RF_OPS_FAMILIES_H

#include "ringflow/status.h"

/* Op definitions (src/ops/<family>.c). */
rf_status *rf__register_array_ops(void); /* Const, Placeholder, Identity, NoOp,
                                            Reshape, Shape, Fill, ZerosLike,
                                            OnesLike */
rf_status *rf__register_state_ops(void); /* Variable, ReadVariable, Assign,
                                            ApplyGradientDescent, ApplyAdam */
rf_status *rf__register_math_ops(void);  /* Add, Sub, Mul, Div, Neg, AddN,
                                            MatMul, Cast, Equal */
rf_status *rf__register_nn_ops(void);    /* BiasAdd, Relu, Sigmoid, Tanh,
                                            Softmax, SparseSoftmaxCrossEntropy.. */
rf_status *rf__register_reduction_ops(void);  /* Sum, Mean, ArgMax */
rf_status *rf__register_runtime_ops(void);    /* _Arg, _Retval, _Send, _Recv */
rf_status *rf__register_collective_ops(void); /* AllReduce, Reduce, Broadcast,
                                                 AllGather, ReduceScatter and
                                                 their participants */

/* CPU kernels (src/kernels/cpu/<family>.c). */
rf_status *rf__register_cpu_array_kernels(void);
rf_status *rf__register_cpu_state_kernels(void);
rf_status *rf__register_cpu_math_kernels(void);
rf_status *rf__register_cpu_nn_kernels(void);
rf_status *rf__register_cpu_reduction_kernels(void);
rf_status *rf__register_cpu_runtime_kernels(void);
rf_status *rf__register_cpu_collective_kernels(void);

#ifdef RF_HAVE_CUDA
/* GPU kernels (CUDA builds only). */
rf_status *rf__register_gpu_runtime_kernels(void); /* src/runtime/gpu/ */
/* src/kernels/cpu/collective_kernels.c: the CPU participants, for GPUs */
rf_status *rf__register_gpu_collective_kernels(void);
/* src/kernels/cuda/<family>.cu */
rf_status *rf__register_gpu_array_kernels(void);
rf_status *rf__register_gpu_state_kernels(void);
rf_status *rf__register_gpu_math_kernels(void);
rf_status *rf__register_gpu_nn_kernels(void);
rf_status *rf__register_gpu_reduction_kernels(void);
#endif

/* Graph passes (src/passes/passes.c). */
rf_status *rf__register_passes(void);
/* BLAS threading (src/kernels/cpu/blas_threads.c). */
rf_status *rf__configure_blas(void);

#endif
