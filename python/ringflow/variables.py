"""Variables: state on a device that lives across a session's steps.

A Variable is three nodes: the variable (its handle, dtype resource), an
initializer assigning the initial value, and a read of its value. Used as
an op input it stands for that read, so `x @ w` works for a Variable w.
"""

from typing import Any, List, Optional, Sequence

import numpy as np

from ringflow import _convert, dtypes, errors, ops
from ringflow._convert import Shape, c_shape
from ringflow._lib import c_name, ffi, lib
from ringflow.framework import (Graph, Operation, Tensor, as_graph,
                                constant_in, convert_to_tensor, graph_of)

__all__ = ["Variable", "global_variables", "global_variables_initializer"]


class Variable:
    """A variable holding `initial_value` once its initializer has run.

    initial_value: a Tensor, array or Python value (converted as
      ringflow.constant does, or to `dtype`); it fixes the dtype and, unless
      `shape` is given (None marking unknown dims), the shape.
    dtype: for a Tensor or Variable initial value, its dtype (another one
      is an InvalidArgumentError: a tensor is not converted).
    The variable is placed by the current device scope. Reading it before
    its initializer (or global_variables_initializer()) has run fails the
    run with FailedPreconditionError naming the variable. It is built
    whole or not at all: a name already used, the variable's or that of a
    node it adds ("<name>/read", "<name>/Assign", ...), is an
    AlreadyExistsError adding nothing; given no name it takes "Variable"
    or "Variable_<k>", the first whose nodes' names are all free.
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
        with graph._lock:
            self._build(graph, initial_value, dtype, name, shape)
        self._trainable = trainable

    def _build(self, graph: Graph, initial_value: Any, dtype: Any,
               name: Optional[str],
               shape: Optional[Sequence[Optional[int]]]) -> None:
        """Adds the nodes, all or none (the caller holds the graph's lock):
        the variable node first, whose builder checks the name (its syntax
        and that it is free), dtype and shape, with the names of the nodes
        after it checked free before; then nothing left can be refused."""
        if isinstance(initial_value, np.ndarray):
            arr = _convert.as_array(initial_value, dtype)
            init_dtype, init_shape = arr.dtype, arr.shape
            init = None
        else:
            init = convert_to_tensor(initial_value, dtype, graph=graph)
            init_dtype, init_shape = init.dtype, init.shape
            if dtype is not None and dtypes.as_dtype(dtype) != init_dtype:
                # A tensor is not converted (as TensorFlow's Variable).
                what = f"variable '{name}'" if name is not None else \
                    "a new Variable"
                raise errors.InvalidArgumentError(
                    f"{what}: dtype {dtypes.as_dtype(dtype).name} requested "
                    f"for the initial value {init.name} of dtype "
                    f"{getattr(init_dtype, 'name', init_dtype)} (cast it)")
        var_shape = init_shape if shape is None else shape
        relaxed = _convert.py_shape(c_shape(var_shape)) != init_shape
        suffixes = ["/read", "/Assign"] + (
            ["/initial_shape", "/initial_value"] if relaxed else [])
        if name is None:
            name = _free_variable_name(graph, suffixes)
        else:
            _check_free(graph, name, suffixes)
        self._dtype = dtypes.as_dtype(init_dtype)
        self._handle = graph._output(
            lib.rf_variable, c_name(name), dtypes.to_c(self._dtype),
            c_shape(var_shape))
        base = self._handle.op.name
        if init is None:
            init = constant_in(graph, arr)
        self._initial_value = init
        self._value = graph._output(
            lib.rf_read_variable, c_name(base + "/read"), self._handle._c)
        # What the initializer assigns, and restore_variables feeds: with a
        # relaxed shape, the initial value reshaped to its own run-time
        # shape, whose static shape is unknown, so that a value of another
        # size along an unknown dim can be fed (a Const's cannot).
        self._assigned = init
        if relaxed:
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


# The ops of the nodes a Variable adds after its variable node, by suffix.
_SUFFIX_OPS = {"": "Variable", "/read": "ReadVariable", "/Assign": "Assign",
               "/initial_shape": "Shape", "/initial_value": "Reshape"}


def _check_free(graph: Graph, name: str, suffixes: List[str]) -> None:
    """AlreadyExistsError, as the C builder words it, when a node the new
    Variable `name` would add has a name already used (checked before any
    node is added; the builder of the variable node checks its name's
    syntax)."""
    for suffix in [""] + suffixes:
        if lib.rf_graph_find_node(graph._c, c_name(name + suffix)) != \
                ffi.NULL:
            what = f" of Variable '{_cut(name)}'" if suffix else ""
            raise errors.AlreadyExistsError(
                f"node '{_cut(name + suffix)}' ({_SUFFIX_OPS[suffix]}"
                f"{what}): the name is already used",
                errors.ALREADY_EXISTS, name + suffix)


def _cut(name: str) -> str:
    """A name as the library's messages quote it: past 200 bytes (node
    names are ASCII) its first 200 and "... (N bytes)"."""
    return name if len(name) <= 200 else \
        f"{name[:200]}... ({len(name)} bytes)"


def _free_variable_name(graph: Graph, suffixes: List[str]) -> str:
    """A name for a Variable given none: "Variable", else "Variable_<k>"
    (as the library generates names), whose nodes' names are all free."""
    k = getattr(graph, "_variable_names_next", 0)
    while True:
        name = "Variable" if k == 0 else f"Variable_{k}"
        k += 1
        if all(lib.rf_graph_find_node(graph._c, c_name(name + s)) ==
               ffi.NULL for s in [""] + suffixes):
            graph._variable_names_next = k
            return name


def global_variables(graph: Optional[Graph] = None) -> List[Variable]:
    """The Variables made in `graph` (default: the default graph) through
    this module, in order."""
    return list(as_graph(graph, "global_variables")._variables)


def global_variables_initializer(graph: Optional[Graph] = None) -> Operation:
    """An op running the initializer of every Variable of `graph` (default:
    the default graph), in no set order: a Variable whose initial value
    reads another needs that one's initializer run first, in a step of its
    own (docs/PYTHON.md)."""
    graph = as_graph(graph, "global_variables_initializer")
    with graph.as_default():
        return ops.group(*[v.initializer for v in graph._variables],
                         name=None)
