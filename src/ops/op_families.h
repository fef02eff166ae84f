/* ops/op_families.h - the registration function of each op family, and the
 * one-time fill of the op table. The graph layer needs op definitions to build
 * nodes, so rf__ops_init lives here, below the kernels and passes; the
 * composition root (runtime/registry_init.c) registers those on top. */
#ifndef RF_OPS_OP_FAMILIES_H
#define RF_OPS_OP_FAMILIES_H

#include "ringflow/status.h"

/* Op definitions (src/ops/<family>.c), registered in this order. */
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
/* conv family: ops/conv_ops.c */
rf_status *rf__register_conv_ops(void);    /* Conv2D, Conv2DBackpropInput,
                                              Conv2DBackpropFilter, MaxPool,
                                              MaxPoolGrad, AvgPool, AvgPoolGrad */
rf_status *rf__register_shape_ops(void);   /* Transpose, Concat, Split, Slice,
                                              ExpandDims, Squeeze, Pad, Tile,
                                              _TileGrad, _PadTo, _SliceTo,
                                              _SplitLike */
rf_status *rf__register_index_ops(void);   /* Gather, _GatherGrad, OneHot,
                                              Select */
rf_status *rf__register_linalg_ops(void);  /* BatchMatMul */
rf_status *rf__register_gelu_ops(void);    /* Gelu, _GeluGrad, _GeluSecond */
rf_status *rf__register_dropout_ops(void); /* Dropout */
rf_status *rf__register_layer_norm_ops(void); /* LayerNorm, _LayerNormGrad */
rf_status *rf__register_batch_norm_ops(void); /* BatchNorm, ...Inference */

/* Registers every op family once (thread-safe; later calls return the first
 * result as a new status the caller frees). Every entry point that looks up
 * ops (node building, graph loading, gradients) calls it. */
rf_status *rf__ops_init(void);

#endif
