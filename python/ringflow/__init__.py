"""ringflow: differentiable multi-device collectives inside a dataflow graph.

A thin front end over the C library's public API in TensorFlow 1 graph
style (docs/PYTHON.md):

    import numpy as np
    import ringflow as rf

    with rf.Graph().as_default() as g:
        xs = []
        for d in range(2):
            with rf.device(f"cpu:{d}"):
                xs.append(rf.placeholder(rf.float32, (3,)))
        sums = rf.nccl.all_sum(xs)
        with rf.Session(g, cpu_devices=2) as sess:
            a = np.ones(3, np.float32)
            print(sess.run(sums, {xs[0]: a, xs[1]: 2 * a}))
"""

from ringflow._lib import lib as _lib
from ringflow import collectives, errors, nccl, nn
from ringflow import checkpoint as checkpoint
from ringflow.array_ops import (concat, dropout, expand_dims, gather, gelu,
                                layer_norm, one_hot, pad, slice, split,
                                squeeze, strided_slice, tile, transpose,
                                where)
from ringflow.dlpack import GpuTensor, from_dlpack
from ringflow.dtypes import (bfloat16, bool, float16, float32, float64,
                             int8, int32, int64, resource, uint8, as_dtype)
from ringflow.framework import (Graph, Operation, Tensor, convert_to_tensor,
                                device, get_default_graph,
                                reset_default_graph)
from ringflow.gradients import gradients
from ringflow.ops import (add, add_n, apply_adam, apply_adamw,
                          apply_gradient_descent, apply_momentum,
                          argmax, assign, assign_mul, bias_add, cast,
                          constant, divide,
                          equal, fill, group, identity, matmul, multiply,
                          negative, no_op, ones_like, placeholder, reduce_mean,
                          reduce_sum, relu, reshape, shape, sigmoid, softmax,
                          sparse_softmax_cross_entropy_with_logits, subtract,
                          tanh, zeros_like)
from ringflow.session import Session, job_tasks, lower
from ringflow.variables import (Variable, global_variables,
                                global_variables_initializer)

__version__ = "%d.%d.%d" % (_lib.RINGFLOW_VERSION_MAJOR,
                            _lib.RINGFLOW_VERSION_MINOR,
                            _lib.RINGFLOW_VERSION_PATCH)

__all__ = [
    "Graph", "GpuTensor", "Operation", "Tensor", "Session", "Variable",
    "collectives",
    "errors", "nccl", "nn", "add", "add_n", "apply_adam", "apply_adamw",
    "apply_gradient_descent", "apply_momentum", "argmax", "as_dtype",
    "assign", "assign_mul", "bfloat16",
    "bias_add", "bool", "cast", "constant", "convert_to_tensor", "device",
    "divide", "equal", "fill", "float16", "float32", "from_dlpack", "float64",
    "get_default_graph", "global_variables",
    "global_variables_initializer", "gradients", "group", "identity",
    "int8", "int32", "int64", "job_tasks", "lower", "matmul", "multiply",
    "negative", "no_op", "ones_like", "placeholder", "reduce_mean",
    "reduce_sum", "relu", "reset_default_graph", "reshape", "resource",
    "shape", "sigmoid", "softmax",
    "sparse_softmax_cross_entropy_with_logits", "subtract", "tanh",
    "uint8", "zeros_like",
]
__all__ += ["concat", "dropout", "expand_dims", "gather", "gelu",
            "layer_norm", "one_hot", "pad", "slice", "split", "squeeze",
            "strided_slice", "tile", "transpose", "where"]
from ringflow.batch_norm import (BatchNormResult, batch_norm,  # noqa: E402
                                 moving_average_update, sync_batch_norm)
__all__ += ["BatchNormResult", "batch_norm", "moving_average_update",
            "sync_batch_norm"]
