"""Graphs, operations and tensors, in TensorFlow 1 graph style.

A `Graph` wraps a C rf_graph; an `Operation` is one of its nodes and a
`Tensor` one output of a node. Ops are added to the default graph (the one
made current by `Graph.as_default()` in this thread, else a global one) on
the device of the innermost `device()` scope. Building one graph from
several threads is safe (each call holds the graph's lock) but the device
scope is the graph's, shared by those threads.
"""

import contextlib
import threading
from typing import Any, Iterator, List, Optional, Sequence, Union

import numpy as np

from ringflow import _convert, dtypes, errors
from ringflow._lib import check, c_name, ffi, lib, text

__all__ = ["Graph", "Operation", "Tensor", "get_default_graph",
           "reset_default_graph", "device", "convert_to_tensor"]


class Graph:
    """A dataflow graph (a C rf_graph): nodes, data and control edges,
    devices. Sessions copy it when they are made, so a graph may be changed
    or dropped afterwards; nodes added later are not in those sessions."""

    def __init__(self) -> None:
        g = lib.rf_graph_new()
        if g == ffi.NULL:
            raise MemoryError("rf_graph_new: out of memory")
        self._c = ffi.gc(g, lib.rf_graph_free)
        self._lock = threading.RLock()
        self._variables: List[Any] = []
        self._scopes: List[List[str]] = []  # the C graph's device scopes

    def as_default(self) -> "contextlib.AbstractContextManager[Graph]":
        """A context manager making this graph the default of this thread:
        ops built inside it without a graph of their own go here."""
        return _default_graph(self)

    def device(self, name: Optional[str]) -> \
            "contextlib.AbstractContextManager[None]":
        """A context manager: nodes added inside it request device `name`
        ("cpu:1", "/gpu:0", "/device:GPU:2", "/task:1/cpu:0"; None or ""
        for no device) unless they name one. Raises InvalidArgumentError for
        a malformed name."""
        return _device_scope(self, name)

    def get_operations(self) -> List["Operation"]:
        """Every node of the graph, in the order they were added."""
        with self._lock:
            n = lib.rf_graph_num_nodes(self._c)
            return [Operation(self, lib.rf_graph_node(self._c, i))
                    for i in range(n)]

    def get_operation_by_name(self, name: str) -> "Operation":
        """The node named `name`; KeyError when there is none."""
        if isinstance(name, str) and "\0" in name:  # names hold no NUL
            raise KeyError(f"the graph has no node named {name[:200]!r}")
        with self._lock:
            node = lib.rf_graph_find_node(self._c, c_name(name))
        if node == ffi.NULL:
            raise KeyError(f"the graph has no node named {name!r}")
        return Operation(self, node)

    def get_tensor_by_name(self, name: str) -> "Tensor":
        """The output "node:index" (or "node" for output 0); KeyError when
        there is no such node or output, or when the index is not written
        as graph files write it (ASCII digits, no sign, no leading zeros:
        "x:00" is refused, as docs/GRAPH_FORMAT.md says); TypeError when
        name is not a str."""
        if not isinstance(name, str):
            raise TypeError(f"get_tensor_by_name takes a str, not "
                            f"{type(name).__name__}")
        op_name, colon, index = name.rpartition(":")
        if not colon:
            op_name, index = name, "0"
        elif not (index.isascii() and index.isdigit() and
                  (index == "0" or not index.startswith("0"))):
            raise KeyError(f"{name[:200]!r}: the output index must be "
                           "decimal digits without sign, spaces or leading "
                           "zeros")
        op = self.get_operation_by_name(op_name)
        if int(index) >= len(op.outputs):
            raise KeyError(f"node {op_name!r} has no output {index}")
        return op.outputs[int(index)]

    def to_json(self) -> str:
        """The graph as JSON (docs/GRAPH_FORMAT.md)."""
        out = ffi.new("char **")
        with self._lock:
            check(lib.rf_graph_to_json(self._c, out))
        try:
            return text(out[0])
        finally:
            lib.rf_string_free(out[0])

    def to_dot(self) -> str:
        """The graph as Graphviz DOT: one cluster per device."""
        out = ffi.new("char **")
        with self._lock:
            check(lib.rf_graph_to_dot(self._c, out))
        try:
            return text(out[0])
        finally:
            lib.rf_string_free(out[0])

    @classmethod
    def from_json(cls, json: str) -> "Graph":
        """A graph read from JSON text (a str, or UTF-8 bytes as read from
        a file); InvalidArgumentError naming what is wrong (node, or line
        and column), NotFoundError for an op that is not registered.
        Variables come back as nodes only."""
        if isinstance(json, (bytes, bytearray)):
            data = bytes(json)  # UTF-8, as a file holds it
        elif isinstance(json, str):
            data = json.encode("utf-8")
        else:
            raise TypeError(f"from_json takes the JSON text (a str or "
                            f"bytes), not {type(json).__name__}")
        out = ffi.new("rf_graph **")
        check(lib.rf_graph_from_json(data, len(data), out))
        return cls._wrap(out[0])

    @classmethod
    def _wrap(cls, c_graph) -> "Graph":
        """A Graph owning the C graph c_graph."""
        g = cls.__new__(cls)
        g._c = ffi.gc(c_graph, lib.rf_graph_free)
        g._lock = threading.RLock()
        g._variables = []
        g._scopes = []
        return g

    def _error(self) -> Exception:
        """The error the graph recorded (then cleared, so building goes
        on), as an exception."""
        from ringflow import errors
        st = lib.rf_graph_status(self._c)
        lib.rf_graph_clear_status(self._c)
        if st == ffi.NULL:
            return errors.InternalError("an op failed without an error")
        return errors._from_status(st, self)

    def _output(self, fn, *args) -> "Tensor":
        """Calls the C op function fn(g, *args) under the lock and wraps its
        rf_output; raises the graph's error if it added nothing."""
        with self._lock:
            out = fn(self._c, *args)
            if out.node == ffi.NULL:
                raise self._error()
            return Tensor(self, out.node, out.index)

    def _node(self, fn, *args) -> "Operation":
        """Like _output, for op functions returning an rf_node *."""
        with self._lock:
            node = fn(self._c, *args)
            if node == ffi.NULL:
                raise self._error()
            return Operation(self, node)

    def __repr__(self) -> str:
        return (f"<ringflow.Graph with {lib.rf_graph_num_nodes(self._c)} "
                f"nodes>")


class Operation:
    """One node of a graph: its name, op type, requested device, inputs and
    outputs. Ops without outputs (no_op, assign, apply_*) are run as
    targets: sess.run(op) returns None for them."""

    __slots__ = ("_graph", "_c")

    def __init__(self, graph: Graph, node) -> None:
        self._graph = graph
        self._c = node

    @property
    def graph(self) -> Graph:
        """The graph holding the node."""
        return self._graph

    @property
    def name(self) -> str:
        """The node's name, unique in its graph."""
        return text(lib.rf_node_name(self._c))

    @property
    def type(self) -> str:
        """The op type ("MatMul", "AllReduce", ...)."""
        return text(lib.rf_node_op(self._c))

    @property
    def device(self) -> str:
        """The requested device in canonical form ("cpu:1",
        "/task:1/gpu:0"), "" when none."""
        return text(lib.rf_node_device(self._c))

    @property
    def inputs(self) -> List["Tensor"]:
        """The tensors feeding the node's data inputs, in order."""
        res = []
        for i in range(lib.rf_node_num_inputs(self._c)):
            o = lib.rf_node_input(self._c, i)
            res.append(Tensor(self._graph, o.node, o.index))
        return res

    @property
    def control_inputs(self) -> List["Operation"]:
        """The nodes this one runs after (control edges)."""
        return [Operation(self._graph, lib.rf_node_control_input(self._c, i))
                for i in range(lib.rf_node_num_control_inputs(self._c))]

    @property
    def outputs(self) -> List["Tensor"]:
        """The node's outputs, in order."""
        return [Tensor(self._graph, self._c, i)
                for i in range(lib.rf_node_num_outputs(self._c))]

    def get_attr(self, name: str) -> Any:
        """The value of attribute `name`: an int, float, bool, str, dtype or
        shape tuple. KeyError when the node has no such attribute."""
        if isinstance(name, str) and "\0" in name:  # names hold no NUL
            raise KeyError(f"node {self.name!r} ({self.type}) has no "
                           f"attribute {name[:200]!r}")
        key = c_name(name)
        for ctype, fn, conv in (
                ("int64_t *", lib.rf_node_attr_int, int),
                ("double *", lib.rf_node_attr_float, float),
                ("bool *", lib.rf_node_attr_bool, bool),
                ("const char **", lib.rf_node_attr_string, text),
                ("rf_dtype *", lib.rf_node_attr_dtype, dtypes.from_c),
                ("rf_shape *", lib.rf_node_attr_shape, _convert.py_shape)):
            out = ffi.new(ctype)
            st = fn(self._c, key, out)
            if st == ffi.NULL:
                return conv(out[0])
            code = lib.rf_status_code(st)
            lib.rf_status_free(st)
            if code == lib.RF_NOT_FOUND:
                break
        raise KeyError(f"node {self.name!r} ({self.type}) has no attribute "
                       f"{name!r} of a type ringflow reads")

    def _add_control_input(self, op: "Operation") -> None:
        with self._graph._lock:
            check(lib.rf_graph_add_control_edge(self._graph._c, op._c,
                                                self._c), self._graph)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Operation) and other._c == self._c

    def __hash__(self) -> int:
        return hash(int(ffi.cast("uintptr_t", self._c)))

    def __repr__(self) -> str:
        dev = f" device={self.device}" if self.device else ""
        return f"<ringflow.Operation '{self.name}' type={self.type}{dev}>"


class Tensor:
    """One output of a node: a value the graph computes at run time.

    `shape` is what shape inference knows when the node is built (None for
    an unknown rank, None for an unknown dim). The operators + - * / @ and
    unary - build add, subtract, multiply, divide, matmul and negative
    nodes (numpy-style broadcasting). `==` tells whether two Tensor objects
    are the same output (use ringflow.equal for elements), so tensors can
    be dict keys (feed_dict)."""

    __slots__ = ("_graph", "_node", "_index", "_c", "_code")

    # NumPy arrays on the left of an operator defer to Tensor's operators.
    __array_priority__ = 100

    def __init__(self, graph: Graph, node, index: int) -> None:
        self._graph = graph
        self._node = node
        self._index = index
        self._c = ffi.new("rf_output *", (node, index))[0]
        self._code = lib.rf_output_dtype(self._c)  # fixed once built

    @property
    def graph(self) -> Graph:
        """The graph holding the node."""
        return self._graph

    @property
    def op(self) -> Operation:
        """The node producing this tensor."""
        return Operation(self._graph, self._node)

    @property
    def value_index(self) -> int:
        """Which output of its node this is."""
        return self._index

    @property
    def name(self) -> str:
        """"node:index", TensorFlow's tensor name."""
        return f"{text(lib.rf_node_name(self._node))}:{self._index}"

    @property
    def dtype(self) -> dtypes.DType:
        """The element type, as a NumPy dtype (or ringflow.resource)."""
        return dtypes.from_c(self._code)

    @property
    def shape(self) -> _convert.Shape:
        """The inferred shape: a tuple with None for unknown dims, or None
        when even the rank is unknown."""
        return _convert.py_shape(lib.rf_output_shape(self._c))

    def get_shape(self) -> _convert.Shape:
        """The same as `shape`."""
        return self.shape

    @property
    def device(self) -> str:
        """The device its node requests ("cpu:1"), "" when none."""
        return text(lib.rf_node_device(self._node))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Tensor) and other._node == self._node and
                other._index == self._index)

    def __hash__(self) -> int:
        return hash((int(ffi.cast("uintptr_t", self._node)), self._index))

    def __bool__(self) -> bool:
        raise TypeError("a ringflow Tensor has no truth value before it is "
                        "run; run it and test the array")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a ringflow Tensor is not iterable")

    def __repr__(self) -> str:
        dev = f" device={self.device}" if self.device else ""
        return (f"<ringflow.Tensor '{self.name}' shape={self.shape} "
                f"dtype={getattr(self.dtype, 'name', self.dtype)}{dev}>")


# ---- the default graph and device scopes ----

_tls = threading.local()
_global_lock = threading.Lock()
_global_graph: Optional[Graph] = None


def _stack() -> List[Graph]:
    stack = getattr(_tls, "stack", None)
    if stack is None:
        stack = _tls.stack = []
    return stack


def get_default_graph() -> Graph:
    """The graph ops go to: the innermost `Graph.as_default()` of this
    thread, else the process's global default graph."""
    global _global_graph
    stack = _stack()
    if stack:
        return stack[-1]
    with _global_lock:
        if _global_graph is None:
            _global_graph = Graph()
        return _global_graph


def reset_default_graph() -> None:
    """Replaces the global default graph with a new empty one. Raises
    AssertionError inside a `Graph.as_default()` block (as TensorFlow)."""
    global _global_graph
    if _stack():
        raise AssertionError("reset_default_graph inside a Graph.as_default "
                             "block")
    with _global_lock:
        _global_graph = Graph()


@contextlib.contextmanager
def _default_graph(graph: Graph) -> Iterator[Graph]:
    stack = _stack()
    stack.append(graph)
    try:
        yield graph
    finally:
        # Its own entry, the innermost one for this graph: a block left out
        # of order (interleaved generators) must not drop another's.
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is graph:
                del stack[i]
                break


@contextlib.contextmanager
def _device_scope(graph: Graph, name: Optional[str]) -> Iterator[None]:
    entry = ["" if name is None else name]  # this scope, by identity
    with graph._lock:
        check(lib.rf_graph_push_device(graph._c, c_name(entry[0])))
        graph._scopes.append(entry)
    try:
        yield
    finally:
        # Its own entry: a scope left out of order (interleaved generators
        # or threads) must not take another's with it. The C graph keeps
        # one stack: pop down to this entry, then push the later ones back.
        with graph._lock:
            stack = graph._scopes
            for i in range(len(stack) - 1, -1, -1):
                if stack[i] is entry:
                    later = stack[i + 1:]
                    for _ in range(len(stack) - i):
                        lib.rf_graph_pop_device(graph._c)
                    del stack[i:]
                    for e in later:  # valid and no deeper than before
                        check(lib.rf_graph_push_device(graph._c,
                                                       c_name(e[0])))
                        stack.append(e)
                    break


def as_graph(graph: Any, what: str) -> Graph:
    """`graph` as the Graph an API call works on: the default graph for
    None; TypeError naming `what` for anything but a Graph (a str, a
    Session)."""
    if graph is None:
        return get_default_graph()
    if not isinstance(graph, Graph):
        raise TypeError(f"{what}: graph must be a ringflow.Graph or None, "
                        f"not {type(graph).__name__}")
    return graph


def device(name: Optional[str]) -> "contextlib.AbstractContextManager[None]":
    """`get_default_graph().device(name)`: nodes built inside request device
    `name` ("cpu:1", "gpu:0", "/task:1/gpu:0", "/device:GPU:1"; None for
    none) unless they name one. InvalidArgumentError for a malformed name.
    """
    return get_default_graph().device(name)


# ---- values as tensors ----

def graph_of(values: Sequence[Any]) -> Graph:
    """The graph of the tensors among `values` (all must share it), else the
    default graph. ValueError when they come from different graphs."""
    graph = None
    for v in values:
        g = getattr(v, "graph", None) if _is_graph_value(v) else None
        if g is None:
            continue
        if graph is None:
            graph = g
        elif g is not graph:
            raise ValueError(f"{v!r} is from another graph than the other "
                             "inputs")
    return graph if graph is not None else get_default_graph()


def _is_graph_value(v: Any) -> bool:
    return isinstance(v, (Tensor, Operation)) or hasattr(v, "_as_tensor")


def constant_in(graph: Graph, value: Any, dtype: Any = None,
                shape: Optional[Sequence[int]] = None,
                name: Optional[str] = None) -> Tensor:
    """A Const node in `graph` holding `value` (see ringflow.constant)."""
    arr = _convert.as_array(value, dtype)
    if shape is not None:
        shape = tuple(_convert.index("constant: shape: a dim", d)
                      for d in shape)
        count = 1
        for d in shape:  # Python ints: np.prod wraps past int64
            if d < 0:
                raise errors.InvalidArgumentError(
                    f"constant: shape {shape}: dim {d} is negative")
            count *= d
        if count >= 1 << 63:
            raise errors.InvalidArgumentError(
                f"constant: shape {shape}: element count overflows int64")
        if arr.size == count:
            arr = arr.reshape(shape)
        else:
            arr = np.broadcast_to(arr, shape)
    t = _convert.copy_to_c(arr)
    return graph._output(lib.rf_const, c_name(name), t)


def convert_to_tensor(value: Any, dtype: Any = None,
                      graph: Optional[Graph] = None,
                      name: Optional[str] = None) -> Tensor:
    """`value` as a Tensor: a Tensor as it is, a Variable as its value, and
    anything else (NumPy arrays, Python numbers and lists) as a new Const
    node of `dtype` (default: ringflow.constant's) in `graph` (default: the
    default graph), under the current device scope."""
    if isinstance(value, Tensor):
        if graph is not None and value.graph is not graph:
            raise ValueError(f"{value!r} is from another graph")
        return value
    if hasattr(value, "_as_tensor"):
        return value._as_tensor()
    if isinstance(value, Operation):
        raise TypeError(f"{value!r} has no output to use as a tensor")
    return constant_in(as_graph(graph, "convert_to_tensor"), value, dtype,
                       name=name)


def outputs_array(tensors: Sequence[Tensor]):
    """A C array of rf_output for `tensors`."""
    arr = ffi.new("rf_output[]", max(len(tensors), 1))
    for i, t in enumerate(tensors):
        arr[i] = t._c
    return arr


TensorLike = Union[Tensor, np.ndarray, float, int, bool, Sequence[Any]]
