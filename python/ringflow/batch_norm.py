"""Batch normalization (include/ringflow/ops.h: rf_batch_norm,
rf_sync_batch_norm_n): statistics over every axis but the last, x of shape
(..., C) with C the channel axis (NHWC, or (N, C)).

y = (x - mean) / sqrt(variance + epsilon) * gamma + beta, the variance
biased. Training normalises with the batch's statistics; inference with
the moving averages, which are Variables of shape (C,) (e.g. zeros and
ones). In training, `update` is an Operation to run with each step: it
sets moving = momentum * moving + (1 - momentum) * batch statistic (the
biased variance for moving_variance, as Keras). Gradients for x, gamma and
beta (through the batch statistics in training).
"""

from typing import Any, List, NamedTuple, Optional, Sequence

from ringflow import _convert
from ringflow._lib import c_name, ffi, lib
from ringflow.framework import (Operation, Tensor, convert_to_tensor,
                                graph_of, outputs_array)
from ringflow.ops import _handle as _variable_handle

__all__ = ["batch_norm", "sync_batch_norm", "moving_average_update",
           "BatchNormResult"]


class BatchNormResult(NamedTuple):
    """y; the statistics y used (batch in training, moving in inference);
    the update Operation (training with moving variables, else None)."""
    y: Tensor
    mean: Tensor
    variance: Tensor
    update: Optional[Operation]


def _handle(v: Any, g) -> Any:
    """A variable's resource handle output (a Variable or its handle)."""
    if v is None:
        return ffi.new("rf_output *")[0]
    h = getattr(v, "handle", v)
    return convert_to_tensor(h, graph=g)._c


def _result(g, r) -> BatchNormResult:
    def t(o):
        return Tensor(g, o.node, o.index)
    return BatchNormResult(t(r.y), t(r.mean), t(r.variance),
                           Operation(g, r.update)
                           if r.update != ffi.NULL else None)


def batch_norm(x: Any, gamma: Any, beta: Any, moving_mean: Any = None,
               moving_variance: Any = None, training: bool = True,
               momentum: float = 0.99, epsilon: float = 1e-3,
               name: Optional[str] = None) -> BatchNormResult:
    """Batch normalization of x (float, rank >= 2, (..., C)) as Keras's
    BatchNormalization layer; gamma and beta (C,) of x's dtype. Inference
    (training=False) needs moving_mean and moving_variance; in training
    they are optional (both or neither). Raises InvalidArgumentError for a
    bad rank, a parameter not (C,), a non-float dtype, epsilon < 0 or
    momentum outside [0, 1]."""
    momentum = _convert.number("batch_norm: momentum", momentum)
    epsilon = _convert.number("batch_norm: epsilon", epsilon)
    training = _convert.flag("batch_norm: training", training)
    g = graph_of([x, gamma, beta])
    x = convert_to_tensor(x, graph=g)
    gamma = convert_to_tensor(gamma, x.dtype, graph=g)
    beta = convert_to_tensor(beta, x.dtype, graph=g)
    out = ffi.new("rf_batch_norm_result *")
    with g._lock:
        lib.rf_batch_norm(g._c, c_name(name), x._c, gamma._c, beta._c,
                          _handle(moving_mean, g),
                          _handle(moving_variance, g),
                          training,
                          momentum, epsilon, out)
        if out.y.node == ffi.NULL:
            raise g._error()
    return _result(g, out[0])


def sync_batch_norm(xs: Sequence[Any], gammas: Sequence[Any],
                    betas: Sequence[Any],
                    moving_means: Optional[Sequence[Any]] = None,
                    moving_variances: Optional[Sequence[Any]] = None,
                    momentum: float = 0.99, epsilon: float = 1e-3,
                    name: Optional[str] = None) -> List[BatchNormResult]:
    """Synchronized batch norm (training) over replicas: xs[i] on device
    i, each normalised with the statistics of the whole batch (all xs),
    all-reduced through ringflow's collectives (so each x needs a device);
    gradients all-reduce likewise. One result per replica, on its device;
    moving_means/moving_variances are per-replica Variables (or None)."""
    momentum = _convert.number("sync_batch_norm: momentum", momentum)
    epsilon = _convert.number("sync_batch_norm: epsilon", epsilon)
    xs = list(xs)
    g = graph_of(xs)
    n = len(xs)
    ts = [convert_to_tensor(x, graph=g) for x in xs]
    gs = [convert_to_tensor(v, ts[0].dtype, graph=g) for v in gammas]
    bs = [convert_to_tensor(v, ts[0].dtype, graph=g) for v in betas]
    if len(gs) != n or len(bs) != n:
        raise ValueError("one gamma and one beta per x")
    mm = mv = ffi.NULL
    if moving_means is not None or moving_variances is not None:
        if len(moving_means or []) != n or len(moving_variances or []) != n:
            raise ValueError("one moving mean and variance per x, or none")
        mm = ffi.new("rf_output[]", [_handle(v, g) for v in moving_means])
        mv = ffi.new("rf_output[]", [_handle(v, g) for v in moving_variances])
    outs = ffi.new("rf_batch_norm_result[]", max(n, 1))
    with g._lock:
        lib.rf_sync_batch_norm_n(g._c, c_name(name), n, outputs_array(ts),
                                 outputs_array(gs), outputs_array(bs), mm,
                                 mv, momentum, epsilon, outs)
        if n == 0 or outs[n - 1].y.node == ffi.NULL:
            raise g._error()
    return [_result(g, outs[i]) for i in range(n)]


def moving_average_update(variable: Any, value: Any, momentum: float,
                          name: Optional[str] = None) -> Operation:
    """An Operation setting variable = momentum * variable + (1 - momentum)
    * value when run (rf_moving_average_update), placed on the variable's
    device: what batch_norm's `update` runs for each moving statistic.
    value has the variable's dtype and shape. Raises TypeError when
    variable is not a Variable (or its handle), InvalidArgumentError for
    momentum outside [0, 1]."""
    momentum = _convert.number("moving_average_update: momentum", momentum)
    h = _variable_handle(variable)
    g = h.graph
    value = convert_to_tensor(value, None if isinstance(value, Tensor)
                              else getattr(variable, "dtype", None), graph=g)
    return g._node(lib.rf_moving_average_update, c_name(name), h._c,
                   value._c, momentum)
