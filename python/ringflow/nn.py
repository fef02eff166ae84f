"""ringflow.nn: the neural-network ops under TensorFlow's tf.nn names.

Convolution and pooling work on NHWC tensors (batch, height, width,
channels) of float32 or float64, with filters (height, width, in_channels,
out_channels), as TensorFlow's defaults. `strides`, `ksize` and `dilations`
may be one int (every spatial axis), two (height, width) or four (batch,
height, width, channels: 1 at batch and channels); `padding` is "SAME" or
"VALID". Bad attrs or shapes raise InvalidArgumentError (a ValueError)
naming the node and op when the graph is built, or from Session.run when the
shapes are known only then."""

from typing import Any, Optional, Sequence, Union

from ringflow import _convert, dtypes
from ringflow._lib import c_name, ffi, lib
from ringflow.array_ops import dropout, gelu
from ringflow.framework import Tensor, convert_to_tensor, graph_of
from ringflow.ops import (bias_add as _bias_add, relu, sigmoid, softmax,
                          sparse_softmax_cross_entropy_with_logits, tanh)

__all__ = ["avg_pool", "avg_pool2d", "avg_pool_grad", "bias_add", "conv2d",
           "conv2d_backprop_filter", "conv2d_backprop_input", "dropout",
           "gelu", "max_pool", "max_pool2d",
           "max_pool_grad", "relu", "sigmoid", "softmax",
           "sparse_softmax_cross_entropy_with_logits", "tanh"]

Ints = Union[int, Sequence[int]]


def _four(value: Ints, what: str):
    """TensorFlow's spelling of a window attr as the C library's 4 ints."""
    v = _convert.indices(what, value)
    if len(v) == 1:
        v = [1, v[0], v[0], 1]
    elif len(v) == 2:
        v = [1, v[0], v[1], 1]
    elif len(v) != 4:
        raise ValueError(f"{what} must have 1, 2 or 4 entries, got {len(v)}")
    return ffi.new("int64_t[4]", v)


def _nhwc(data_format: Optional[str]) -> None:
    if data_format not in (None, "NHWC"):
        raise ValueError(f"data_format must be NHWC, got {data_format!r}")


def _filter_format(filter_format: Optional[str]) -> bytes:
    if filter_format not in (None, "HWIO", "OHWI"):
        raise ValueError("filter_format must be 'HWIO' or 'OHWI', got "
                         f"{str(filter_format)[:64]!r}")
    return (filter_format or "HWIO").encode("utf-8")


def _padding(padding: Any) -> bytes:
    if not isinstance(padding, str):
        raise ValueError("padding must be 'SAME' or 'VALID' (explicit "
                         "paddings are not supported)")
    return padding.encode("utf-8")


def conv2d(input: Any, filters: Any, strides: Ints, padding: str,
           data_format: str = "NHWC", dilations: Optional[Ints] = None,
           name: Optional[str] = None,
           filter_format: str = "HWIO") -> Tensor:
    """2-D convolution (cross-correlation, as TensorFlow): input (n, h, w, c)
    and filters (kh, kw, c, out_channels) of one float dtype ->
    (n, oh, ow, out_channels). SAME: oh = ceil(h / stride); VALID:
    oh = (h - (kh - 1) * dilation - 1) // stride + 1. filter_format "OHWI":
    filters are (out_channels, kh, kw, c), cuDNN's layout (GPU devices then
    skip a filter transpose per call) and PyTorch's weight permuted
    (0, 2, 3, 1); gradients keep the format."""
    _nhwc(data_format)
    fmt = _filter_format(filter_format)
    g = graph_of([input, filters])
    x = convert_to_tensor(input, graph=g)
    f = convert_to_tensor(filters, x.dtype, graph=g)
    d = _four(dilations, "dilations") if dilations is not None else ffi.NULL
    return g._output(lib.rf_conv2d_with_format, c_name(name), x._c, f._c,
                     _four(strides, "strides"), _padding(padding), d, fmt)


def conv2d_backprop_input(input_sizes: Any, filter: Any, out_backprop: Any,
                          strides: Ints, padding: str,
                          data_format: str = "NHWC",
                          dilations: Optional[Ints] = None,
                          name: Optional[str] = None,
                          filter_format: str = "HWIO") -> Tensor:
    """The gradient of conv2d with respect to its input (the node
    rf.gradients builds): input_sizes (n, h, w, c) an int32 vector or a
    list, filter (kh, kw, c, out_channels), out_backprop (n, oh, ow,
    out_channels) of filter's dtype -> (n, h, w, c). strides, padding,
    dilations and filter_format as conv2d's."""
    _nhwc(data_format)
    fmt = _filter_format(filter_format)
    g = graph_of([input_sizes, filter, out_backprop])
    f = convert_to_tensor(filter, graph=g)
    sizes = convert_to_tensor(input_sizes, dtypes.int32, graph=g)
    dy = convert_to_tensor(out_backprop, f.dtype, graph=g)
    d = _four(dilations, "dilations") if dilations is not None else ffi.NULL
    return g._output(lib.rf_conv2d_backprop_input_with_format, c_name(name),
                     sizes._c, f._c, dy._c, _four(strides, "strides"),
                     _padding(padding), d, fmt)


def conv2d_backprop_filter(input: Any, filter_sizes: Any, out_backprop: Any,
                           strides: Ints, padding: str,
                           data_format: str = "NHWC",
                           dilations: Optional[Ints] = None,
                           name: Optional[str] = None,
                           filter_format: str = "HWIO") -> Tensor:
    """The gradient of conv2d with respect to its filter: input (n, h, w,
    c), filter_sizes (kh, kw, c, out_channels) an int32 vector or a list,
    out_backprop (n, oh, ow, out_channels) of input's dtype -> (kh, kw, c,
    out_channels). filter_format "OHWI": filter_sizes and the result are
    (out_channels, kh, kw, c)."""
    _nhwc(data_format)
    fmt = _filter_format(filter_format)
    g = graph_of([input, filter_sizes, out_backprop])
    x = convert_to_tensor(input, graph=g)
    sizes = convert_to_tensor(filter_sizes, dtypes.int32, graph=g)
    dy = convert_to_tensor(out_backprop, x.dtype, graph=g)
    d = _four(dilations, "dilations") if dilations is not None else ffi.NULL
    return g._output(lib.rf_conv2d_backprop_filter_with_format, c_name(name),
                     x._c, sizes._c, dy._c, _four(strides, "strides"),
                     _padding(padding), d, fmt)


def _pool(fn, input: Any, ksize: Ints, strides: Ints, padding: str,
          data_format: str, name: Optional[str]) -> Tensor:
    _nhwc(data_format)
    g = graph_of([input])
    x = convert_to_tensor(input, graph=g)
    return g._output(fn, c_name(name), x._c, _four(ksize, "ksize"),
                     _four(strides, "strides"), _padding(padding))


def max_pool2d(input: Any, ksize: Ints, strides: Ints, padding: str,
               data_format: str = "NHWC",
               name: Optional[str] = None) -> Tensor:
    """The largest element of each window (padding takes no part; NaN
    propagates) -> (n, oh, ow, c). Its gradient goes to each window's first
    maximum."""
    return _pool(lib.rf_max_pool, input, ksize, strides, padding,
                 data_format, name)


def avg_pool2d(input: Any, ksize: Ints, strides: Ints, padding: str,
               data_format: str = "NHWC",
               name: Optional[str] = None) -> Tensor:
    """The mean of each window over the input elements in it (padding not
    counted, as TensorFlow) -> (n, oh, ow, c)."""
    return _pool(lib.rf_avg_pool, input, ksize, strides, padding,
                 data_format, name)


# TensorFlow's other names of the 2-D pools (tf.nn.max_pool / avg_pool
# take NHWC input of rank 4 as these do).
max_pool = max_pool2d
avg_pool = avg_pool2d


def max_pool_grad(orig_input: Any, orig_output: Any, grad: Any,
                  ksize: Ints, strides: Ints, padding: str,
                  data_format: str = "NHWC",
                  name: Optional[str] = None) -> Tensor:
    """MaxPool's gradient with respect to its input (TensorFlow's
    MaxPoolGrad): orig_input (n, h, w, c) and orig_output are the pool's
    input and output, grad (n, oh, ow, c) its output's gradient, ksize,
    strides and padding the pool's -> (n, h, w, c), each window's grad
    added at its first maximum."""
    _nhwc(data_format)
    g = graph_of([orig_input, orig_output, grad])
    x = convert_to_tensor(orig_input, graph=g)
    y = convert_to_tensor(orig_output, x.dtype, graph=g)
    dy = convert_to_tensor(grad, x.dtype, graph=g)
    return g._output(lib.rf_max_pool_grad, c_name(name), x._c, y._c, dy._c,
                     _four(ksize, "ksize"), _four(strides, "strides"),
                     _padding(padding))


def avg_pool_grad(orig_input_shape: Any, grad: Any, ksize: Ints,
                  strides: Ints, padding: str, data_format: str = "NHWC",
                  name: Optional[str] = None) -> Tensor:
    """AvgPool's gradient with respect to its input (TensorFlow's
    AvgPoolGrad): orig_input_shape (n, h, w, c) an int32 vector or a list,
    grad (n, oh, ow, c) -> (n, h, w, c), each window's grad spread evenly
    over its input elements."""
    _nhwc(data_format)
    g = graph_of([orig_input_shape, grad])
    dy = convert_to_tensor(grad, graph=g)
    sizes = convert_to_tensor(orig_input_shape, dtypes.int32, graph=g)
    return g._output(lib.rf_avg_pool_grad, c_name(name), sizes._c, dy._c,
                     _four(ksize, "ksize"), _four(strides, "strides"),
                     _padding(padding))


def bias_add(value: Any, bias: Any, data_format: Optional[str] = None,
             name: Optional[str] = None) -> Tensor:
    """value (..., c) + bias (c), for any rank >= 1: an NHWC activation gets
    one bias per channel. Float dtypes."""
    _nhwc(data_format if data_format != "N...C" else None)
    return _bias_add(value, bias, name=name)
