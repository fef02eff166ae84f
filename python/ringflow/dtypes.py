"""Element types: ringflow's dtypes as NumPy dtypes.

float16 is np.float16 and bfloat16 is ml_dtypes.bfloat16; the others are
NumPy's own. `resource` is the dtype of a variable's handle, which has no
NumPy counterpart. Anything NumPy reads as a dtype ("float32", np.int64,
np.dtype("f4"), ml_dtypes.bfloat16) is accepted where a dtype is asked for.
"""

from typing import Any, Union

import ml_dtypes
import numpy as np

from ringflow._lib import lib, text

__all__ = ["float16", "bfloat16", "float32", "float64", "int8", "uint8",
           "int32", "int64", "bool", "resource", "DType", "as_dtype"]


class _Resource:
    """The dtype of a variable's handle (a Variable's `.handle`)."""

    name = "resource"

    def __repr__(self) -> str:
        return "ringflow.resource"


resource = _Resource()

float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool = np.dtype(np.bool_)  # noqa: A001 (tf.bool's name)

DType = Union[np.dtype, _Resource]

# rf_dtype <-> NumPy, keyed by the C library's own names (rf_dtype_name).
_FROM_RF = {}
for _code in range(lib.RF_DTYPE_COUNT):
    _name = text(lib.rf_dtype_name(_code))
    _FROM_RF[_code] = resource if _name == "resource" else globals()[_name]
_TO_RF = {v: k for k, v in _FROM_RF.items()}
del _code, _name


def as_dtype(value: Any) -> DType:
    """The ringflow dtype for `value`: a NumPy dtype (or anything NumPy reads
    as one, except None), a C dtype name ("bfloat16"), or `resource`.
    Raises TypeError for None and for a dtype ringflow has no tensors of
    (complex, str, uint16 ...)."""
    if value is resource or value == "resource":
        return resource
    if value is None:  # np.dtype(None) is float64: a dtype left out
        raise TypeError("None is not a dtype")
    if isinstance(value, str):
        code = lib.rf_dtype_from_name(value.encode())
        if code != lib.RF_DTYPE_INVALID:
            return _FROM_RF[code]
    try:
        dt = np.dtype(value)
    except TypeError:
        raise TypeError(f"{value!r} is not a dtype") from None
    if dt.byteorder == ">" or (dt.byteorder == "<" and not dt.isnative):
        dt = dt.newbyteorder("=")  # '>f4' is float32: values convert
    if dt not in _TO_RF:
        raise TypeError(f"ringflow has no {dt} tensors; its dtypes are "
                        + ", ".join(str(d) for d in _TO_RF))
    return dt


def to_c(dtype: Any) -> int:
    """The rf_dtype of a dtype (as_dtype's rules)."""
    return _TO_RF[as_dtype(dtype)]


def from_c(code: int) -> DType:
    """The dtype of an rf_dtype value."""
    return _FROM_RF[code]


