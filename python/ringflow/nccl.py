"""tf.contrib.nccl's API on ringflow: the same names, arguments and
semantics, on any devices (virtual CPU devices, GPUs through CUDA or
NCCL, processes of an MPI job), with the same gradients (all_sum: all_sum
of the gradients; reduce_sum: broadcast of the gradient; broadcast:
reduce_sum of the consumers' gradients).

Differences: errors the reference raises as ValueError are
ringflow.errors.InvalidArgumentError, which is a ValueError; ringflow
also has gradients for all_prod, all_min and all_max (docs/COLLECTIVES.md)
where the reference raises LookupError.
"""

from typing import Any, List, Optional, Sequence

from ringflow import collectives
from ringflow.framework import Tensor, convert_to_tensor

__all__ = ["all_sum", "all_prod", "all_min", "all_max", "reduce_sum",
           "broadcast"]


def all_sum(tensors: Sequence[Any],
            name: Optional[str] = None) -> List[Tensor]:
    """Returns a list of tensors with the all-reduce sum across `tensors`.

    tensors: the inputs, each assigned to a device (same dtype and shape).
    Tensor i of the result is on the device of tensors[i]. A run that
    needs one result runs every participant (where the reference hangs).
    Raises InvalidArgumentError (a ValueError) for an empty list ("need n
    >= 1 inputs") or an input without a device ("Device assignment
    required for collective ops").
    """
    return collectives.all_reduce(tensors, "sum", name)


def all_prod(tensors: Sequence[Any],
             name: Optional[str] = None) -> List[Tensor]:
    """Returns a list of tensors with the all-reduce product across
    `tensors` (as all_sum)."""
    return collectives.all_reduce(tensors, "prod", name)


def all_min(tensors: Sequence[Any],
            name: Optional[str] = None) -> List[Tensor]:
    """Returns a list of tensors with the all-reduce min across `tensors`
    (as all_sum)."""
    return collectives.all_reduce(tensors, "min", name)


def all_max(tensors: Sequence[Any],
            name: Optional[str] = None) -> List[Tensor]:
    """Returns a list of tensors with the all-reduce max across `tensors`
    (as all_sum)."""
    return collectives.all_reduce(tensors, "max", name)


def reduce_sum(tensors: Sequence[Any], name: Optional[str] = None) -> Tensor:
    """Returns a tensor with the reduce sum across `tensors`.

    The result is on the current device scope's device; one input must be
    on that device, else InvalidArgumentError "No input tensor uses the
    same device as the Reduce op". Inputs need devices, as for all_sum.
    """
    return collectives.reduce(tensors, "sum", name)


def broadcast(tensor: Any, name: Optional[str] = None) -> Tensor:
    """Returns a tensor that can be efficiently transferred to other
    devices.

    tensor: the tensor to send; it must be assigned to a device. The
    broadcast node is placed on that device (whatever the device scope),
    and its result may be used by ops on any other device of the same kind:
    each consuming device receives the value. Consumers only on its own
    device read the input directly (the broadcast is removed). A consumer
    on a device of another kind (GPU to CPU) is an UnimplementedError when
    a session compiles the graph.
    """
    t = convert_to_tensor(tensor)
    with t.graph.device(t.device):
        return collectives.broadcast(t, name)
