"""Variables: state on a device that lives across a session's steps.

A Variable is three nodes: the variable (its handle, dtype resource), an
initializer assigning the initial value, and a read of its value. Used as
an op input it stands for that read, so `x @ w` works for a Variable w.
"""

from typing import Any, List, Optional, Sequence

import numpy as np

from ringflow import _convert, dtypes, errors, ops
from ringflow._convert import Shape, c_shape
from ringflow._lib import c_name, lib
from ringflow.framework import (Graph, Operation, Tensor, convert_to_tensor,
                                get_default_graph, graph_of)

__all__ = ["Variable", "global_variables", "global_variables_initializer"]


class Variable:
    """A variable holding `initial_value` once its initializer has run.

    initial_value: a Tensor, array or Python value (converted as
      ringflow.constant does, or to `dtype`); it fixes the dtype and, unless
      `shape` is given (None marking unknown dims), the shape.
    The variable is placed by the current device scope. Reading it before
    its initializer (or global_variables_initializer()) has run fails the
    run with FailedPreconditionError naming the variable.
    """

    def __init__(self, initial_value: Any, dtype: Any = None,
                 name: Optional[str] = None,
                 shape: Optional[Sequence[Optional[int]]] = None,
                 trainable: bool = True) -> None:
        graph = graph_of([initial_value])
        if not isinstance(initial_value, Tensor) and not hasattr(
                initial_value, "_as_tensor"):
            # converted (and checked) before any node is added
            initial_value = _convert.as_array(initial_value, dtype)
        if shape is not None:
            _check_shape(initial_value, shape, name)
        init = convert_to_tensor(initial_value, dtype, graph=graph)
        self._dtype = init.dtype
        self._trainable = trainable
        self._handle = graph._output(
            lib.rf_variable, c_name(name), dtypes.to_c(self._dtype),
            c_shape(init.shape if shape is None else shape))
        base = self._handle.op.name
        self._initial_value = init
        self._value = graph._output(
            lib.rf_read_variable, c_name(base + "/read"), self._handle._c)
        # What the initializer assigns, and restore_variables feeds: with a
        # relaxed shape, the initial value reshaped to its own run-time
        # shape, whose static shape is unknown, so that a value of another
        # size along an unknown dim can be fed (a Const's cannot).
        self._assigned = init
        if self.shape != init.shape:
            self._assigned = graph._output(
                lib.rf_reshape, c_name(base + "/initial_value"), init._c,
                graph._output(lib.rf_shape_of_op,
                              c_name(base + "/initial_shape"), init._c,
                              lib.RF_INT64)._c)
        self._initializer = graph._node(
            lib.rf_assign, c_name(base + "/Assign"), self._handle._c,
            self._assigned._c)
        graph._variables.append(self)

    @property
    def name(self) -> str:
        """The variable node's name."""
        return self._handle.op.name

    @property
    def dtype(self) -> dtypes.DType:
        """The element type (NumPy dtype)."""
        return self._dtype

    @property
    def shape(self) -> Shape:
        """The variable's shape (None for unknown dims)."""
        return self._value.shape

    @property
    def device(self) -> str:
        """The device its node requests, "" when none."""
        return self._handle.device

    @property
    def graph(self) -> Graph:
        """The graph holding it."""
        return self._handle.graph

    @property
    def handle(self) -> Tensor:
        """The variable node's output: a resource handle, what the assign
        and apply_* ops take."""
        return self._handle

    @property
    def op(self) -> Operation:
        """The variable node."""
        return self._handle.op

    @property
    def initializer(self) -> Operation:
        """The op assigning the initial value; run it once first."""
        return self._initializer

    @property
    def initial_value(self) -> Tensor:
        """The tensor the initializer assigns."""
        return self._initial_value

    @property
    def trainable(self) -> bool:
        """Whether it was made trainable (informative only)."""
        return self._trainable

    def value(self) -> Tensor:
        """The variable's read node (one per Variable): its value in a
        step."""
        return self._value

    def read_value(self) -> Tensor:
        """A new read node of the variable, on the current device scope."""
        return self.graph._output(lib.rf_read_variable, c_name(None),
                                  self._handle._c)

    def assign(self, value: Any, name: Optional[str] = None) -> Operation:
        """An op setting the variable to `value` (converted to its dtype
        when not a Tensor) when run; a differing dtype or shape is an
        InvalidArgumentError (now, or from the run when only it knows)."""
        return ops.assign(self, value, name=name)

    def _as_tensor(self) -> Tensor:
        return self._value

    def __repr__(self) -> str:
        return (f"<ringflow.Variable '{self.name}' shape={self.shape} "
                f"dtype={self._dtype.name}>")


ops._install_operators(Variable)


def _check_shape(value: Any, shape: Sequence[Optional[int]],
                 name: Optional[str]) -> None:
    """InvalidArgumentError unless `shape` (None or -1 for unknown dims)
    relaxes the shape of the initial value `value` (a Tensor, Variable or
    array): the same rank, and its known dims equal to the value's."""
    have = value.shape if isinstance(value, np.ndarray) else \
        convert_to_tensor(value).shape
    want = _convert.py_shape(c_shape(shape))  # ValueError past rank 8
    if have is None:
        return
    if len(want) != len(have) or any(
            w is not None and h is not None and w != h
            for w, h in zip(want, have)):
        what = f"variable '{name}'" if name is not None else "a new Variable"
        raise errors.InvalidArgumentError(
            f"{what}: shape {tuple(shape)} does not fit the initial value's "
            f"shape {have} (only its dims may be relaxed to None)")


def global_variables(graph: Optional[Graph] = None) -> List[Variable]:
    """The Variables made in `graph` (default: the default graph) through
    this module, in order."""
    return list((graph or get_default_graph())._variables)


def global_variables_initializer(graph: Optional[Graph] = None) -> Operation:
    """An op running the initializer of every Variable of `graph` (default:
    the default graph)."""
    graph = graph or get_default_graph()
    with graph.as_default():
        return ops.group(*[v.initializer for v in graph._variables],
                         name=None)
