"""rf.gradients: reverse-mode gradients as more graph nodes (the C
library's rf_gradients; docs/COLLECTIVES.md for the collectives')."""

from typing import Any, List, Optional

from ringflow import errors
from ringflow._lib import ffi, lib
from ringflow.framework import (Tensor, convert_to_tensor, graph_of,
                                outputs_array)

__all__ = ["gradients"]


def _as_list(v: Any) -> List[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _grad_y(g: Any, gy: Any, y: Tensor) -> Tensor:
    """grad_y as a Tensor: a value becomes a Const of y's dtype on y's
    device."""
    if isinstance(gy, Tensor) or hasattr(gy, "_as_tensor"):
        return convert_to_tensor(gy, graph=g)
    with g.device(y.device):
        return convert_to_tensor(gy, y.dtype, graph=g)


def gradients(ys: Any, xs: Any, grad_ys: Any = None,
              colocate_gradients_with_ops: bool = True
              ) -> List[Optional[Tensor]]:
    """The gradients d(sum of ys)/d(x) for each x of xs, as new nodes.

    ys, xs: a Tensor (or Variable, standing for its value) or a list of
      them. grad_ys: None (ones of each y's shape) or one tensor per y,
      weighting it (an array or Python value becomes a constant of the
      y's dtype on the y's device).
    Returns one Tensor per x, None for an x no y depends on (so [] for
    xs=[], and all None for ys=[], as TensorFlow). Gradient nodes
    go on the devices of the forward ops (colocate_gradients_with_ops is
    always on; the argument is accepted for TensorFlow's signature).
    Raises NotFoundError "No gradient defined for op 'X' (node 'N')" for
    an op without a gradient function (MaxPoolGrad, _LayerNormGrad),
    InvalidArgumentError for a gradient the op refuses for its inputs
    (collectives of integer dtypes: "No gradient defined for AllReduce of
    int32"; other integer tensors get gradients by the same rules in their
    dtype) or a grad_y whose dtype or shape does not match, and ValueError
    for a grad_ys list of another length or holding None.
    """
    ys, xs = _as_list(ys), _as_list(xs)
    g = graph_of(ys + xs + (_as_list(grad_ys) if grad_ys is not None else []))
    ys = [convert_to_tensor(y, graph=g) for y in ys]
    xs = [convert_to_tensor(x, graph=g) for x in xs]
    gys = ffi.NULL
    if grad_ys is not None:
        grad_ys = _as_list(grad_ys)
        if len(grad_ys) != len(ys):
            raise ValueError(f"{len(grad_ys)} grad_ys for {len(ys)} ys")
        if any(gy is None for gy in grad_ys):
            raise ValueError("grad_ys must be all tensors or None")
    if not xs or not ys:
        # As TensorFlow: nothing to differentiate, or no y to depend on.
        return [None] * len(xs)
    if grad_ys is not None:
        gys = outputs_array([_grad_y(g, gy, y) for gy, y in zip(grad_ys, ys)])
    dxs = ffi.new("rf_output[]", max(len(xs), 1))
    with g._lock:
        st = lib.rf_gradients(g._c, outputs_array(ys), len(ys),
                              outputs_array(xs), len(xs), gys, dxs)
        if st != ffi.NULL:
            lib.rf_graph_clear_status(g._c)  # building goes on
            raise errors._from_status(st, g)
    return [None if dxs[i].node == ffi.NULL else
            Tensor(g, dxs[i].node, dxs[i].index) for i in range(len(xs))]
