"""Array ops with TensorFlow 1 names: transpose, concat, split, slice,
expand_dims, squeeze, pad, tile, gather, one_hot, where, gelu, dropout,
layer_norm (include/ringflow/ops.h).

Each adds a node to the graph of its tensor inputs (else the default graph)
on the device of the current device scope. Index arguments (perm, axis,
begin, size, paddings, multiples, size splits) are Python ints or int
sequences fixed when the node is built (TensorFlow also takes Tensors
there; ringflow does not). Every dtype works; gradients flow through each op
to float inputs. Shape errors raise InvalidArgumentError (a ValueError)
naming the node and op, now when the shapes are known, else from
Session.run.
"""

from typing import Any, List, Optional, Sequence, Union

import numpy as np

from ringflow import _convert, dtypes
from ringflow._lib import c_name, ffi, lib
from ringflow.framework import (Tensor, convert_to_tensor, graph_of,
                                outputs_array)

__all__ = ["transpose", "concat", "split", "slice", "strided_slice",
           "expand_dims",
           "squeeze", "pad", "tile", "gather", "one_hot", "where", "gelu",
           "dropout", "layer_norm"]


def _ints(values: Any, what: str):
    """A C int64 array of `values` (an int or int sequence: Python or
    NumPy ints, TypeError for floats) and its length."""
    v = _convert.indices(what, values)
    return ffi.new("int64_t[]", v or [0]), len(v)


def _one(x: Any):
    g = graph_of([x])
    return g, convert_to_tensor(x, graph=g)


def transpose(a: Any, perm: Optional[Sequence[int]] = None,
              name: Optional[str] = None) -> Tensor:
    """a with its dims permuted: output dim k is a's dim perm[k]; perm
    None reverses them (a's rank must then be known when the node is
    built). Always copies."""
    g, a = _one(a)
    if perm is None:
        return g._output(lib.rf_transpose, c_name(name), a._c, ffi.NULL, 0)
    p, n = _ints(perm, "transpose: perm")
    return g._output(lib.rf_transpose, c_name(name), a._c, p, n)


def concat(values: Sequence[Any], axis: int,
           name: Optional[str] = None) -> Tensor:
    """values (one or more tensors of one dtype and rank >= 1, equal dims
    off `axis`) joined along axis."""
    values = list(values)
    g = graph_of(values)
    ts = [convert_to_tensor(v, graph=g) for v in values]
    return g._output(lib.rf_concat, c_name(name), outputs_array(ts), len(ts),
                     _convert.index("concat: axis", axis))


def split(value: Any, num_or_size_splits: Union[int, Sequence[int]],
          axis: int = 0, num: Optional[int] = None,
          name: Optional[str] = None) -> List[Tensor]:
    """value cut along axis: an int n gives n equal pieces (the dim must
    divide); a list gives pieces of those sizes (one may be -1: what is
    left), adding up to the dim. Returns the list of pieces."""
    g, value = _one(value)
    if isinstance(num_or_size_splits, (int, np.integer, float, np.floating)):
        n = _convert.index("split: num_or_size_splits",
                           num_or_size_splits, 32)
        sizes = ffi.NULL
    else:
        sizes, n = _ints(num_or_size_splits, "split: a size split")
        if num is not None and _convert.index("split: num", num) != n:
            raise ValueError(f"num={num} but {n} size splits were given")
    outs = ffi.new("rf_output[]", max(n, 1))
    op = g._node(lib.rf_split_v, c_name(name), value._c, sizes, n,
                 _convert.index("split: axis", axis), outs)
    return op.outputs


def slice(input_: Any, begin: Sequence[int], size: Sequence[int],
          name: Optional[str] = None) -> Tensor:
    """input_[begin[k] : begin[k] + size[k]] in every dim; size -1: to the
    end of that dim."""
    g, x = _one(input_)
    b, nb = _ints(begin, "slice: begin")
    s, ns = _ints(size, "slice: size")
    if nb != ns:
        raise ValueError(f"begin has {nb} entries but size {ns}")
    return g._output(lib.rf_slice, c_name(name), x._c, b, s, nb)


def strided_slice(input_: Any, begin: Sequence[int], end: Sequence[int],
                  strides: Optional[Sequence[int]] = None,
                  begin_mask: int = 0, end_mask: int = 0,
                  shrink_axis_mask: int = 0,
                  name: Optional[str] = None) -> Tensor:
    """TensorFlow's tf.strided_slice without ellipsis_mask and
    new_axis_mask: input_[begin[k]:end[k]:strides[k]] in each dim k <
    len(begin) (Python's rules: negative indices from the end, clamped),
    dims after that whole. Bit k of begin_mask / end_mask leaves begin[k] /
    end[k] out (Python's None); bit k of shrink_axis_mask takes element
    begin[k] alone and drops the dim. strides None: all 1. Every dtype;
    differentiable. InvalidArgumentError for a zero stride, more entries
    than input_'s rank, a mask bit at or past them, or a shrunk index
    outside its dim."""
    g, x = _one(input_)
    b, nb = _ints(begin, "strided_slice: begin")
    e, ne = _ints(end, "strided_slice: end")
    s, ns = _ints([1] * nb if strides is None else strides,
                  "strided_slice: strides")
    if not nb == ne == ns:
        raise ValueError(f"begin, end and strides have {nb}, {ne} and {ns} "
                         "entries")
    return g._output(lib.rf_strided_slice, c_name(name), x._c, b, e, s, nb,
                     _convert.index("strided_slice: begin_mask", begin_mask),
                     _convert.index("strided_slice: end_mask", end_mask),
                     _convert.index("strided_slice: shrink_axis_mask",
                                    shrink_axis_mask))


def expand_dims(input: Any, axis: int, name: Optional[str] = None) -> Tensor:
    """input with a dim of size 1 inserted at axis (-1: last). No copy."""
    g, x = _one(input)
    return g._output(lib.rf_expand_dims, c_name(name), x._c,
                     _convert.index("expand_dims: axis", axis))


def squeeze(input: Any, axis: Union[None, int, Sequence[int]] = None,
            name: Optional[str] = None) -> Tensor:
    """input without the size-1 dims `axis` (None: every size-1 dim). No
    copy."""
    g, x = _one(input)
    a, n = (ffi.NULL, 0) if axis is None else _ints(axis, "squeeze: axis")
    if n == 0:
        return g._output(lib.rf_squeeze, c_name(name), x._c, ffi.NULL, 0)
    return g._output(lib.rf_squeeze, c_name(name), x._c, a, n)


def pad(tensor: Any, paddings: Sequence[Sequence[int]],
        mode: str = "CONSTANT", constant_values: Any = 0,
        name: Optional[str] = None) -> Tensor:
    """tensor with paddings[k][0] elements before and paddings[k][1] after
    dim k, set to constant_values (converted to tensor's dtype). Only mode
    "CONSTANT" (NotImplementedError otherwise). A Python float that is not
    a whole number as constant_values of an integer tensor is a
    TypeError."""
    if str(mode).upper() != "CONSTANT":
        raise NotImplementedError(f"pad mode {mode!r}: only CONSTANT")
    fill = _convert.number("pad: constant_values", constant_values)
    g, x = _one(tensor)
    p = np.asarray(paddings, dtype=object)
    if p.shape == (0,):
        p = p.reshape(0, 2)     # [] for a rank-0 tensor: no pairs
    if p.ndim != 2 or (p.size and p.shape[1] != 2):
        raise ValueError(f"paddings must be a list of [before, after] pairs, "
                         f"got shape {p.shape}")
    c, n = _ints(p.reshape(-1).tolist(), "pad: paddings")
    if (isinstance(constant_values, (float, np.floating)) and
            x.dtype is not dtypes.resource and x.dtype.kind in "iu" and
            not float(constant_values).is_integer()):
        # As for an operand: a Python float is not truncated (TensorFlow).
        raise TypeError(f"cannot pad a {x.dtype} tensor with "
                        f"constant_values {constant_values!r}: not a whole "
                        "number")
    return g._output(lib.rf_pad, c_name(name), x._c, c, n, fill)


def tile(input: Any, multiples: Sequence[int],
         name: Optional[str] = None) -> Tensor:
    """input repeated multiples[k] (>= 0) times along dim k."""
    g, x = _one(input)
    m, n = _ints(multiples, "tile: multiples")
    return g._output(lib.rf_tile, c_name(name), x._c, m, n)


def gather(params: Any, indices: Any, axis: int = 0,
           name: Optional[str] = None) -> Tensor:
    """params[..., indices, ...] along axis (an embedding lookup with axis
    0): shape params.shape[:axis] + indices.shape + params.shape[axis+1:].
    indices int32 or int64 (Python ints become int32). An index out of
    range fails the run on CPU devices (InvalidArgumentError) and gives
    zeros on GPU devices. The gradient w.r.t. params is dense (a
    scatter-add; summed where an index repeats)."""
    g = graph_of([params, indices])
    params = convert_to_tensor(params, graph=g)
    indices = convert_to_tensor(indices, graph=g)
    return g._output(lib.rf_gather, c_name(name), params._c, indices._c,
                     _convert.index("gather: axis", axis))


def one_hot(indices: Any, depth: int, on_value: Any = 1, off_value: Any = 0,
            axis: int = -1, dtype: Any = dtypes.float32,
            name: Optional[str] = None) -> Tensor:
    """indices (uint8, int32 or int64) of rank r with a new dim of `depth`
    at axis of the result, in [-(r + 1), r] (negative counts from the
    result's end: -1 last, as tf.one_hot; -2 and below TensorFlow
    refuses): on_value where the index equals the position, off_value
    elsewhere (an index outside [0, depth): all off), as `dtype` (None:
    float32). on_value and off_value pass through a C double: integers
    past 2**53 are rounded; for an integer dtype a value that is not a
    whole number is a TypeError and one past the dtype's range an
    OverflowError (as constant)."""
    on = _convert.number("one_hot: on_value", on_value)
    off = _convert.number("one_hot: off_value", off_value)
    dt = dtypes.float32 if dtype is None else dtypes.as_dtype(dtype)
    if dt is not dtypes.resource and dt.kind in "iu":
        for what, v in (("on_value", on), ("off_value", off)):
            if not float(v).is_integer():
                raise TypeError(f"one_hot: {what} {v!r} is not a whole "
                                f"number, for a {dt} result")
            info = np.iinfo(dt)
            if not info.min <= v <= info.max:
                raise OverflowError(f"one_hot: {what} {v!r} is out of "
                                    f"{dt}'s range {info.min}..{info.max}")
    g, x = _one(indices)
    return g._output(lib.rf_one_hot, c_name(name), x._c,
                     _convert.index("one_hot: depth", depth),
                     on, off,
                     _convert.index("one_hot: axis", axis),
                     dtypes.to_c(dtypes.float32 if dtype is None
                                 else dtype))


def where(condition: Any, x: Any = None, y: Any = None,
          name: Optional[str] = None) -> Tensor:
    """x where condition (bool) is true, else y; the three broadcast
    NumPy-style (tf.where in TF 2 / SelectV2). Gradients flow to x and y.
    The one-argument form (coordinates of true elements) is not supported
    (NotImplementedError)."""
    if x is None or y is None:
        raise NotImplementedError("where(condition) without x and y")
    g = graph_of([condition, x, y])
    like = next((v for v in (x, y) if isinstance(v, Tensor) or
                 hasattr(v, "_as_tensor")), None)
    dt = convert_to_tensor(like, graph=g).dtype if like is not None else None
    c = convert_to_tensor(condition, dtypes.bool, graph=g)
    x = convert_to_tensor(x, dt, graph=g)
    y = convert_to_tensor(y, dt, graph=g)
    return g._output(lib.rf_select, c_name(name), c._c, x._c, y._c)


def gelu(features: Any, approximate: bool = False,
         name: Optional[str] = None) -> Tensor:
    """GELU of a float tensor, as tf.nn.gelu: approximate False, the exact
    0.5 x (1 + erf(x / sqrt(2))); True, the tanh approximation
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). approximate is a
    bool (NumPy's too): anything else is a TypeError."""
    if not isinstance(approximate, (bool, np.bool_)):
        raise TypeError(f"gelu: approximate must be True or False, not "
                        f"{approximate!r}")
    g, x = _one(features)
    return g._output(lib.rf_gelu, c_name(name), x._c, bool(approximate))


def dropout(x: Any, rate: float, seed: Optional[int] = 0,
            name: Optional[str] = None) -> Tensor:
    """x with each element kept (scaled by 1 / (1 - rate)) or zeroed, rate
    in [0, 1); float dtypes. The output is x * mask, so a dropped NaN or
    infinity is NaN (as in TensorFlow and PyTorch). The decisions are a
    pure function of (seed, the session's step, the device), reproducible
    across runs and replicas (include/ringflow/ops.h gives the exact key);
    the node's output 1 is the mask. Unlike tf.nn.dropout, `seed` is
    required to vary the pattern between layers (None is 0). seed is the C
    int64: an int (NumPy's too; a float is a TypeError) in
    -2**63..2**63-1, else InvalidArgumentError."""
    rate = _convert.number("dropout: rate", rate)
    seed = 0 if seed is None else _convert.index("dropout: seed", seed)
    g, t = _one(x)
    return g._output(lib.rf_dropout, c_name(name), t._c, rate, seed)


def layer_norm(x: Any, gamma: Any, beta: Any, epsilon: float = 1e-5,
               name: Optional[str] = None) -> Tensor:
    """Layer normalization over the last axis, as torch.nn.LayerNorm:
    (x - mean) / sqrt(var + epsilon) * gamma + beta per row, var the
    biased variance; x float of rank >= 1, shape (..., C); gamma and beta
    (C,) of x's dtype; epsilon >= 0 (PyTorch's default 1e-5). Gradients
    for x, gamma and beta."""
    epsilon = _convert.number("layer_norm: epsilon", epsilon)
    g = graph_of([x, gamma, beta])
    x = convert_to_tensor(x, graph=g)
    gamma = convert_to_tensor(gamma, x.dtype, graph=g)
    beta = convert_to_tensor(beta, x.dtype, graph=g)
    return g._output(lib.rf_layer_norm, c_name(name), x._c, gamma._c,
                     beta._c, epsilon)
