"""One function per op of include/ringflow/ops.h, with TensorFlow 1 names.

Each adds a node to the graph of its tensor inputs (else the default graph)
on the device of the current device scope, and returns its output Tensor
(or, for ops without outputs, its Operation). Inputs may be Tensors,
Variables, NumPy arrays or Python values; a non-Tensor input becomes a
Const node (of the other input's dtype for binary ops; a Python float
that is not a whole number meeting an integer tensor is a TypeError, as in
TensorFlow, rather than truncated). Shape and dtype
checks are the C library's: a refused node raises InvalidArgumentError (a
ValueError) naming the node and op, and adds no node of its own (the Const
nodes made of its non-Tensor inputs stay in the graph, unused, so never
run). Values are computed
only when a Session runs the graph; run-time errors are raised by
Session.run.
"""

from typing import Any, Optional, Sequence, Union

from ringflow import _convert, dtypes
from ringflow._lib import c_name, ffi, lib
from ringflow.framework import (Operation, Tensor, constant_in,
                                convert_to_tensor, get_default_graph,
                                graph_of, outputs_array)
from ringflow._convert import c_shape

__all__ = [
    "constant", "placeholder", "identity", "no_op", "group", "add",
    "subtract", "multiply", "divide", "negative", "add_n", "matmul", "cast",
    "equal", "bias_add", "relu", "sigmoid", "tanh", "softmax",
    "sparse_softmax_cross_entropy_with_logits", "reduce_sum", "reduce_mean",
    "argmax", "reshape", "shape", "fill", "zeros_like", "ones_like",
    "assign", "apply_gradient_descent", "apply_adam", "apply_adamw",
    "apply_momentum",
]

Axis = Union[None, int, Sequence[int]]


def _tensors(values: Sequence[Any], dtype: Any = None):
    """The graph of `values` and each of them as a Tensor there."""
    g = graph_of(values)
    return g, [convert_to_tensor(v, dtype, graph=g) for v in values]


def _unary(fn, x: Any, name: Optional[str], *args: Any) -> Tensor:
    g, (x,) = _tensors([x])
    return g._output(fn, c_name(name), x._c, *args)


def _binary(fn, x: Any, y: Any, name: Optional[str]) -> Tensor:
    g = graph_of([x, y])
    # A Python value takes the dtype of the tensor it meets (as in TF).
    like = next((v for v in (x, y) if isinstance(v, Tensor) or
                 hasattr(v, "_as_tensor")), None)
    dt = convert_to_tensor(like, graph=g).dtype if like is not None else None
    x = convert_to_tensor(x, None if _is_tensor(x) else dt, graph=g)
    y = convert_to_tensor(y, None if _is_tensor(y) else dt, graph=g)
    return g._output(fn, c_name(name), x._c, y._c)


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_tensor")


# ---- sources and plumbing ----

def constant(value: Any, dtype: Any = None,
             shape: Optional[Sequence[int]] = None,
             name: Optional[str] = None) -> Tensor:
    """A Const node holding `value` (a NumPy array, number or nested list),
    copied now.

    dtype: any dtype NumPy reads (ringflow.float32, "bfloat16", np.int64);
      default: an array's own dtype, float32 for Python floats, int32 for
      Python ints (int64 past int32's range), bool for bools.
    shape: if given, the value is reshaped (same number of elements) or
      broadcast to it.
    Raises TypeError for values or dtypes ringflow has no tensors of,
    ValueError for ranks past 8.
    """
    return constant_in(get_default_graph(), value, dtype, shape, name)


def placeholder(dtype: Any, shape: Optional[Sequence[Optional[int]]] = None,
                name: Optional[str] = None) -> Tensor:
    """A value given at run time through `feed_dict`.

    shape: None for any shape, or dims with None (or -1) for unknown ones;
      a fed value must match the known dims (else InvalidArgumentError from
      Session.run). dtype: any ringflow dtype.
    """
    return get_default_graph()._output(
        lib.rf_placeholder, c_name(name), dtypes.to_c(dtype), c_shape(shape))


def identity(input: Any, name: Optional[str] = None) -> Tensor:
    """The input unchanged, on the current device scope: moves a value to
    a device (no copy between CPU devices)."""
    return _unary(lib.rf_identity, input, name)


def no_op(name: Optional[str] = None) -> Operation:
    """A node that does nothing: a target to hang control inputs on."""
    return get_default_graph()._node(lib.rf_noop, c_name(name))


def group(*inputs: Any, name: Optional[str] = None) -> Operation:
    """A NoOp that runs after every given op (or tensor's op): running it
    runs them all."""
    for v in inputs:
        if not isinstance(v, Operation) and not _is_tensor(v):
            raise TypeError(f"group takes Operations, Tensors and Variables, "
                            f"not {type(v).__name__} {v!r:.60}")
    ops = [v if isinstance(v, Operation) else
           convert_to_tensor(v).op for v in inputs]
    g = graph_of(ops)
    noop = g._node(lib.rf_noop, c_name(name))
    for op in ops:
        noop._add_control_input(op)
    return noop


# ---- arithmetic ----

def add(x: Any, y: Any, name: Optional[str] = None) -> Tensor:
    """x + y, broadcasting numpy-style; same dtype (any numeric)."""
    return _binary(lib.rf_add, x, y, name)


def subtract(x: Any, y: Any, name: Optional[str] = None) -> Tensor:
    """x - y, broadcasting numpy-style; same dtype (any numeric)."""
    return _binary(lib.rf_sub, x, y, name)


def multiply(x: Any, y: Any, name: Optional[str] = None) -> Tensor:
    """x * y, broadcasting numpy-style; same dtype (any numeric)."""
    return _binary(lib.rf_mul, x, y, name)


def divide(x: Any, y: Any, name: Optional[str] = None) -> Tensor:
    """x / y, broadcasting numpy-style; same dtype. Integer division
    truncates toward zero; an integer division by zero fails the run
    (InvalidArgumentError) on CPU devices and gives an unspecified value on
    GPU devices."""
    return _binary(lib.rf_div, x, y, name)


def negative(x: Any, name: Optional[str] = None) -> Tensor:
    """-x, elementwise."""
    return _unary(lib.rf_neg, x, name)


def add_n(inputs: Sequence[Any], name: Optional[str] = None) -> Tensor:
    """The sum of one or more tensors of one dtype and shape."""
    g, ts = _tensors(list(inputs))
    return g._output(lib.rf_add_n, c_name(name), outputs_array(ts), len(ts))


def matmul(a: Any, b: Any, transpose_a: bool = False,
           transpose_b: bool = False, name: Optional[str] = None) -> Tensor:
    """The matrix product (m, k) x (k, n) -> (m, n), after the optional
    transposes; float dtypes and int32/int64. Operands of a known rank
    other than 2 multiply batch by batch: (..., m, k) x (..., k, n) with
    the batch dims broadcast (BatchMatMul, the same dtypes; the
    transposes swap the last two dims)."""
    g = graph_of([a, b])
    # A Python or NumPy operand takes the other's dtype, as for add (so
    # float64_tensor @ [[1.0], [2.0]] is a float64 product).
    like = next((v for v in (a, b) if _is_tensor(v)), None)
    dt = convert_to_tensor(like, graph=g).dtype if like is not None else None
    a, b = (convert_to_tensor(v, None if _is_tensor(v) else dt, graph=g)
            for v in (a, b))
    fn = lib.rf_matmul
    if any(t.shape is not None and len(t.shape) != 2 for t in (a, b)):
        fn = lib.rf_batch_matmul
    return g._output(fn, c_name(name), a._c, b._c,
                     _convert.flag("matmul: transpose_a", transpose_a),
                     _convert.flag("matmul: transpose_b", transpose_b))


def cast(x: Any, dtype: Any, name: Optional[str] = None) -> Tensor:
    """x converted to `dtype` elementwise (floats to ints truncate)."""
    return _unary(lib.rf_cast, x, name, dtypes.to_c(dtype))


def equal(x: Any, y: Any, name: Optional[str] = None) -> Tensor:
    """x == y elementwise, as bool, broadcasting numpy-style."""
    return _binary(lib.rf_equal, x, y, name)


# ---- neural network ----

def bias_add(value: Any, bias: Any, name: Optional[str] = None) -> Tensor:
    """value (..., c) + bias (c)."""
    return _binary(lib.rf_bias_add, value, bias, name)


def relu(features: Any, name: Optional[str] = None) -> Tensor:
    """max(features, 0) elementwise."""
    return _unary(lib.rf_relu, features, name)


def sigmoid(x: Any, name: Optional[str] = None) -> Tensor:
    """1 / (1 + exp(-x)) elementwise; float dtypes."""
    return _unary(lib.rf_sigmoid, x, name)


def tanh(x: Any, name: Optional[str] = None) -> Tensor:
    """tanh(x) elementwise; float dtypes."""
    return _unary(lib.rf_tanh, x, name)


def softmax(logits: Any, axis: Optional[int] = None,
            name: Optional[str] = None) -> Tensor:
    """Softmax over `axis` (None or -1: the last; another axis needs the
    rank known when the node is built); float dtypes."""
    if axis is None or axis == -1:
        return _unary(lib.rf_softmax, logits, name)
    return _unary(lib.rf_softmax_axis, logits, name,
                  _convert.index("softmax: axis", axis))


def sparse_softmax_cross_entropy_with_logits(
        labels: Any = None, logits: Any = None,
        name: Optional[str] = None) -> Tensor:
    """Per-example loss (b) of logits (b, c) (float) against int32/int64
    labels (b). The node's output 1 (`.op.outputs[1]`) is the backprop
    (b, c). A label outside [0, c) fails the run on CPU devices
    (InvalidArgumentError); on GPU devices that row is NaN."""
    if labels is None or logits is None:
        raise ValueError("both labels and logits are needed")
    g = graph_of([labels, logits])
    logits = convert_to_tensor(logits, graph=g)
    labels = convert_to_tensor(labels, graph=g)
    return g._output(lib.rf_sparse_softmax_cross_entropy, c_name(name),
                     logits._c, labels._c)


# ---- reductions and shapes ----

def _axes(axis: Axis, what: str):
    if axis is None:
        return ffi.NULL, -1
    axes = _convert.indices(what + ": axis", axis)
    return ffi.new("int64_t[]", axes or [0]), len(axes)


def reduce_sum(input_tensor: Any, axis: Axis = None, keepdims: bool = False,
               name: Optional[str] = None) -> Tensor:
    """The sum over `axis` (an int or ints, negative counting from the end;
    None: every axis), keeping reduced dims as 1 when keepdims."""
    axes, n = _axes(axis, "reduce_sum")
    return _unary(lib.rf_sum, input_tensor, name, axes, n,
                  _convert.flag("reduce_sum: keepdims", keepdims))


def reduce_mean(input_tensor: Any, axis: Axis = None,
                keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """The mean over `axis` (as reduce_sum); integers truncate."""
    axes, n = _axes(axis, "reduce_mean")
    return _unary(lib.rf_mean, input_tensor, name, axes, n,
                  _convert.flag("reduce_mean: keepdims", keepdims))


def argmax(input: Any, axis: Optional[int] = 0,
           name: Optional[str] = None) -> Tensor:
    """The index (int64) of the largest element along `axis` (None: 0, as
    tf.argmax), the first one on ties."""
    return _unary(lib.rf_argmax, input, name, 0 if axis is None else
                  _convert.index("argmax: axis", axis))


def reshape(tensor: Any, shape: Any, name: Optional[str] = None) -> Tensor:
    """tensor with the same elements in `shape`: a list of dims (one may be
    -1; [] or () for a scalar; an int n is [n]) or an int32/int64 vector
    Tensor. No copy."""
    g = graph_of([tensor, shape])
    tensor = convert_to_tensor(tensor, graph=g)
    if isinstance(shape, Tensor):
        return g._output(lib.rf_reshape, c_name(name), tensor._c, shape._c)
    dims = _convert.indices("reshape: shape", shape)  # () is a scalar
    return g._output(lib.rf_reshape_to, c_name(name), tensor._c, len(dims),
                     ffi.new("int64_t[]", dims or [0]))


def shape(input: Any, out_type: Any = dtypes.int32,
          name: Optional[str] = None) -> Tensor:
    """The shape of `input` as an int32 or int64 vector, at run time."""
    return _unary(lib.rf_shape_of_op, input, name, dtypes.to_c(out_type))


def fill(dims: Any, value: Any, name: Optional[str] = None) -> Tensor:
    """A tensor of shape `dims` (int32/int64 vector) filled with the scalar
    `value`."""
    g = graph_of([dims, value])
    dims = convert_to_tensor(dims, graph=g)
    value = convert_to_tensor(value, graph=g)
    return g._output(lib.rf_fill, c_name(name), dims._c, value._c)


def zeros_like(input: Any, name: Optional[str] = None) -> Tensor:
    """Zeros of input's shape and dtype."""
    return _unary(lib.rf_zeros_like, input, name)


def ones_like(input: Any, name: Optional[str] = None) -> Tensor:
    """Ones of input's shape and dtype."""
    return _unary(lib.rf_ones_like, input, name)


# ---- state (see also ringflow.Variable) ----

def _handle(ref: Any) -> Tensor:
    handle = getattr(ref, "handle", ref)
    if not isinstance(handle, Tensor) or handle.dtype is not dtypes.resource:
        raise TypeError(f"{ref!r} is not a Variable (or its handle)")
    return handle


def assign(ref: Any, value: Any, name: Optional[str] = None) -> Operation:
    """An op setting variable `ref` to `value` when run (the value is
    shared, not copied). A dtype or shape that differs from the variable's
    is an InvalidArgumentError now, or when the run finds it (a value whose
    shape is known only then)."""
    h = _handle(ref)
    value = convert_to_tensor(value, _value_dtype(ref, value), graph=h.graph)
    return h.graph._node(lib.rf_assign, c_name(name), h._c, value._c)


def assign_mul(ref: Any, value: Any, name: Optional[str] = None) -> Tensor:
    """Multiplies variable `ref` by `value` elementwise, in place, when run;
    the result is the variable's new value. value has the variable's float
    dtype and shape (an InvalidArgumentError otherwise, now or from the run).
    While nothing else holds the variable's value its buffer stays, so a
    step that advances it can be replayed as a CUDA graph."""
    h = _handle(ref)
    value = convert_to_tensor(value, _value_dtype(ref, value), graph=h.graph)
    return h.graph._output(lib.rf_assign_mul, c_name(name), h._c, value._c)


def _value_dtype(var: Any, value: Any) -> Any:
    """The dtype a Python value given for variable `var` (a Variable or its
    handle) takes: the variable's."""
    if _is_tensor(value):
        return None
    dt = getattr(var, "dtype", None)
    if dt is dtypes.resource:  # a handle: the variable node's dtype attr
        try:
            return dtypes.as_dtype(var.op.get_attr("dtype"))
        except (KeyError, TypeError, AttributeError):
            return None
    return dt


def apply_gradient_descent(var: Any, alpha: Any, delta: Any,
                           name: Optional[str] = None) -> Operation:
    """An op doing var -= alpha * delta when run (alpha a scalar, delta of
    var's shape and dtype)."""
    h = _handle(var)
    g = h.graph
    alpha, delta = (convert_to_tensor(x, _value_dtype(var, x), graph=g)
                    for x in (alpha, delta))
    return g._node(lib.rf_apply_gradient_descent, c_name(name), h._c,
                   alpha._c, delta._c)


def apply_adam(var: Any, m: Any, v: Any, beta1_power: Any, beta2_power: Any,
               lr: Any, beta1: Any, beta2: Any, epsilon: Any, grad: Any,
               name: Optional[str] = None) -> Operation:
    """TensorFlow's ApplyAdam on variables var, m, v (one shape and dtype);
    the rest are scalars except grad (var's shape):
    lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power);
    m = beta1 m + (1 - beta1) grad; v = beta2 v + (1 - beta2) grad^2;
    var -= lr_t m / (sqrt(v) + epsilon)."""
    hs = [_handle(x) for x in (var, m, v)]
    g = hs[0].graph
    rest = [convert_to_tensor(x, _value_dtype(var, x), graph=g)
            for x in (beta1_power, beta2_power, lr, beta1, beta2, epsilon,
                      grad)]
    return g._node(lib.rf_apply_adam, c_name(name),
                   *[t._c for t in hs + rest])


def apply_adamw(var: Any, m: Any, v: Any, beta1_power: Any, beta2_power: Any,
                lr: Any, beta1: Any, beta2: Any, epsilon: Any,
                weight_decay: Any, grad: Any,
                name: Optional[str] = None) -> Operation:
    """AdamW (decoupled weight decay) on variables var, m, v as PyTorch's
    torch.optim.AdamW; the rest are scalars except grad (var's shape):
    m = beta1 m + (1 - beta1) grad; v = beta2 v + (1 - beta2) grad^2;
    m_hat = m / (1 - beta1_power); v_hat = v / (1 - beta2_power);
    var -= lr (m_hat / (sqrt(v_hat) + epsilon) + weight_decay var), var the
    value before the step. Raises InvalidArgumentError for non-scalar
    hyper-parameters or a grad of another dtype or shape."""
    hs = [_handle(x) for x in (var, m, v)]
    g = hs[0].graph
    rest = [convert_to_tensor(x, _value_dtype(var, x), graph=g)
            for x in (beta1_power, beta2_power, lr, beta1, beta2, epsilon,
                      weight_decay, grad)]
    return g._node(lib.rf_apply_adamw, c_name(name),
                   *[t._c for t in hs + rest])


def apply_momentum(var: Any, accum: Any, lr: Any, grad: Any, momentum: Any,
                   use_nesterov: bool = False,
                   name: Optional[str] = None) -> Operation:
    """TensorFlow's ApplyMomentum on variables var and accum (one shape and
    dtype); lr and momentum are scalars, grad has var's shape:
    accum = momentum accum + grad; var -= lr accum, or with use_nesterov
    var -= lr grad + lr momentum accum. Raises InvalidArgumentError as
    apply_adamw does."""
    hs = [_handle(x) for x in (var, accum)]
    g = hs[0].graph
    lr, grad, momentum = (convert_to_tensor(x, _value_dtype(var, x), graph=g)
                          for x in (lr, grad, momentum))
    return g._node(lib.rf_apply_momentum, c_name(name), hs[0]._c, hs[1]._c,
                   lr._c, grad._c, momentum._c,
                   _convert.flag("apply_momentum: use_nesterov", use_nesterov))


# ---- operators of Tensor (and Variable) ----

def _install_operators(cls: type) -> None:
    cls.__add__ = lambda x, y: add(x, y)
    cls.__radd__ = lambda x, y: add(y, x)
    cls.__sub__ = lambda x, y: subtract(x, y)
    cls.__rsub__ = lambda x, y: subtract(y, x)
    cls.__mul__ = lambda x, y: multiply(x, y)
    cls.__rmul__ = lambda x, y: multiply(y, x)
    cls.__truediv__ = lambda x, y: divide(x, y)
    cls.__rtruediv__ = lambda x, y: divide(y, x)
    cls.__matmul__ = lambda x, y: matmul(x, y)
    cls.__rmatmul__ = lambda x, y: matmul(y, x)
    cls.__neg__ = lambda x: negative(x)


_install_operators(Tensor)
