"""Collectives as graph ops, with gradients (include/ringflow/
collectives.h, docs/COLLECTIVES.md).

Each input must be on a device (a device scope when it was built): else
InvalidArgumentError "Device assignment required for collective ops". The
participants of one collective meet when a session runs them (a run that
needs one runs them all); participants that do not all come within the
session's timeout fail with DeadlineExceededError naming the missing
devices.
Reductions: "sum", "prod", "min", "max", "avg" (sum / n; integers
truncate). Gradients: see ringflow.gradients and docs/COLLECTIVES.md.
"""

from typing import Any, List, Optional, Sequence, Union

import numpy as np

from ringflow import dtypes, errors
from ringflow._lib import c_name, check, ffi, lib
from ringflow.framework import (Tensor, convert_to_tensor, graph_of,
                                outputs_array)

__all__ = ["all_reduce", "reduce", "broadcast", "all_gather",
           "reduce_scatter", "REDUCTIONS"]

REDUCTIONS = {"sum": lib.RF_REDUCE_SUM, "prod": lib.RF_REDUCE_PROD,
              "min": lib.RF_REDUCE_MIN, "max": lib.RF_REDUCE_MAX,
              "avg": lib.RF_REDUCE_AVG}

Reduction = Union[str, int]


def _reduction(reduction: Reduction) -> int:
    # The C enum's ints are taken too, but never a bool or a float (True
    # and 1.0 equal RF_REDUCE_PROD's 1).
    if (isinstance(reduction, (int, np.integer)) and
            not isinstance(reduction, (bool, np.bool_)) and
            reduction in REDUCTIONS.values()):
        return int(reduction)
    try:
        return REDUCTIONS[reduction]
    except (KeyError, TypeError):
        raise ValueError(f"unknown reduction {reduction!r}; one of "
                         + ", ".join(REDUCTIONS)) from None


def _participants(fn, tensors: Sequence[Any], name: Optional[str],
                  *reduction: int) -> List[Tensor]:
    """Calls an rf_*_n builder: one participant per input, all or none."""
    tensors = list(tensors)
    g = graph_of(tensors)
    ins = [convert_to_tensor(t, graph=g) for t in tensors]
    outs = ffi.new("rf_output[]", max(len(ins), 1))
    with g._lock:
        # Participant i on tensors[i]'s device whatever the device scope,
        # as TensorFlow's nccl.all_sum (the C builders take the scope's):
        # "" scopes no device.
        check(lib.rf_graph_push_device(g._c, b""))
        try:
            fn(g._c, c_name(name), outputs_array(ins), len(ins), *reduction,
               outs)
        finally:
            lib.rf_graph_pop_device(g._c)
        if outs[0].node == ffi.NULL:
            raise g._error()
    return [Tensor(g, outs[i].node, outs[i].index) for i in range(len(ins))]


def all_reduce(tensors: Sequence[Any], reduction: Reduction = "sum",
               name: Optional[str] = None,
               comm_dtype: Any = None) -> List[Tensor]:
    """The all-reduce of `tensors` (one per device, one dtype and shape).

    Returns one tensor per input, on that input's device, each holding the
    reduction of all inputs (bit-identical on every device). `name` names
    the collective (the participants are "<name>_<i>"); generated when
    None. comm_dtype: the dtype the collective travels in, set on every
    participant (rf_all_reduce_set_comm_dtype): "bfloat16" or "float16"
    (or those dtypes) for a float32 all-reduce, "float32" for full
    precision whatever the session's comm_dtype; None or "auto": the
    session's. Raises InvalidArgumentError for no inputs, an input without
    a device, inputs of different dtypes (naming them and their devices),
    or a comm_dtype the all-reduce cannot take.
    """
    wire = lib.RF_DTYPE_INVALID if comm_dtype in (None, "auto") \
        else dtypes.to_c(comm_dtype)
    tensors = list(tensors)
    if wire != lib.RF_DTYPE_INVALID:
        # rf_all_reduce_set_comm_dtype's checks, made before any participant
        # is built: a refused all-reduce adds nothing.
        wire_name = ffi.string(lib.rf_dtype_name(wire)).decode()
        if wire not in (lib.RF_FLOAT32, lib.RF_BFLOAT16, lib.RF_FLOAT16):
            raise errors.InvalidArgumentError(
                f"all_reduce: comm_dtype must be float32, bfloat16 or "
                f"float16 (or None or 'auto'), got {wire_name}")
        if tensors and wire != lib.RF_FLOAT32:
            if not isinstance(tensors[0], Tensor):
                g = graph_of(tensors)
                tensors = [convert_to_tensor(t, graph=g) for t in tensors]
            first = tensors[0]
            if first.dtype != dtypes.float32:
                raise errors.InvalidArgumentError(
                    f"all_reduce: comm_dtype {wire_name} narrows: only "
                    f"float32 all-reduces take it, the inputs are "
                    f"{first.dtype.name}")
    outs = _participants(lib.rf_all_reduce_n, tensors, name,
                         _reduction(reduction))
    if wire != lib.RF_DTYPE_INVALID:
        for t in outs:
            with t.graph._lock:
                check(lib.rf_all_reduce_set_comm_dtype(t.op._c, wire),
                      t.graph)
    return outs


def reduce(tensors: Sequence[Any], reduction: Reduction = "sum",
           name: Optional[str] = None) -> Tensor:
    """One node reducing `tensors` (on different devices) to one output.

    The output is on the current device scope's device, else the first
    input's; one input must be on that device, else InvalidArgumentError
    "No input tensor uses the same device as the Reduce op".
    """
    tensors = list(tensors)
    g = graph_of(tensors)
    ins = [convert_to_tensor(t, graph=g) for t in tensors]
    return g._output(lib.rf_reduce, c_name(name), outputs_array(ins),
                     len(ins), _reduction(reduction))


def broadcast(tensor: Any, name: Optional[str] = None) -> Tensor:
    """One node sending `tensor` to every device that consumes the result.

    Placed on the current device scope's device, else the input's; the
    output may feed ops on any devices of the same kind (a CPU-GPU mix is
    an UnimplementedError when a session compiles it).
    """
    t = convert_to_tensor(tensor)
    return t.graph._output(lib.rf_broadcast, c_name(name), t._c)


def all_gather(tensors: Sequence[Any],
               name: Optional[str] = None) -> List[Tensor]:
    """Participants of an all-gather: inputs of one shape (d0, ...) ->
    every participant gets (n * d0, ...): the blocks in rank order, which
    is device order (not the order of `tensors`)."""
    return _participants(lib.rf_all_gather_n, tensors, name)


def reduce_scatter(tensors: Sequence[Any], reduction: Reduction = "sum",
                   name: Optional[str] = None) -> List[Tensor]:
    """Participants of a reduce-scatter: inputs of one shape (n * d0, ...)
    -> the participant of rank r gets rows [r * d0, (r + 1) * d0) of the
    reduction, rank order = device order (not the order of `tensors`: the
    i-th result holds the rows of the rank of tensors[i]'s device)."""
    return _participants(lib.rf_reduce_scatter_n, tensors, name,
                         _reduction(reduction))
