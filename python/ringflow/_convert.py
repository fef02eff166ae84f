"""Values across the C boundary: shapes, NumPy arrays in (fed without a
copy through rf_tensor_new_external) and out (arrays over the fetched
tensor's memory, which they keep alive).

Fed arrays are kept in `_kept` until the C library calls _rf_py_release
for them (when the last reference to their tensor goes, from whichever
thread drops it: cffi takes the GIL for the callback)."""

import itertools
import numbers
import operator
import reprlib
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ringflow import _fastrun, dlpack, dtypes
from ringflow._lib import check, ffi, lib

Shape = Optional[Tuple[Optional[int], ...]]

_kept = {}
_keys = itertools.count(1)


@ffi.def_extern()
def _rf_py_release(data, arg):
    _kept.pop(int(ffi.cast("uintptr_t", arg)), None)


def flag(what: str, value: Any) -> bool:
    """A flag argument: True or False (NumPy's bools too); anything else
    (a string, an int, None) is a TypeError naming it, never read as
    truthy."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be True or False, not {value!r}")
    return bool(value)


def index(what: str, value: Any, bits: int = 64) -> int:
    """An index argument (an axis, a dim, a size, a count): a Python or
    NumPy int, never a float cut to one (TypeError naming it); past the C
    argument's int64 (or int of `bits`) an InvalidArgumentError naming it,
    as the library's own range errors, not an OverflowError. A bool is a
    TypeError too (True is not the index 1: reduce_sum(x, True) meant
    keepdims)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be an int, not bool {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not "
                        f"{type(value).__name__} {reprlib.repr(value)}"
                        ) from None
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        from ringflow import errors
        raise errors.InvalidArgumentError(
            f"{what} {v} is out of range: an int{bits}, "
            f"-2**{bits - 1}..2**{bits - 1}-1")
    return v


def number(what: str, value: Any) -> float:
    """A real-number argument (a rate, an epsilon, a momentum, a fill
    value) as the C double: a Python or NumPy number or bool (a 0-d array
    of one too); a str, None or a complex is a TypeError naming it (float()
    would read "0.5" as 0.5)."""
    if isinstance(value, (numbers.Real, np.bool_)) or (
            isinstance(value, np.ndarray) and value.ndim == 0 and
            value.dtype.kind in "biuf"):
        return float(value)
    raise TypeError(f"{what} must be a number, not "
                    f"{type(value).__name__} {reprlib.repr(value)}")


def indices(what: str, values: Any) -> list:
    """An int or a sequence of ints (a NumPy int array too) as a list of
    int64 index arguments (index()'s rules for each)."""
    if isinstance(values, np.ndarray):
        values = values.tolist() if values.ndim else values.item()
    if isinstance(values, (list, tuple)):
        return [index(what + " entry", v) for v in values]
    return [index(what, values)]


def c_shape(shape: Any):
    """An rf_shape (cdata struct) from None (unknown rank) or a sequence of
    dims, None or -1 marking an unknown one."""
    s = ffi.new("rf_shape *")
    if shape is None:
        s.rank = lib.RF_UNKNOWN_RANK
        return s[0]
    dims = [-1 if d is None else index("shape: a dim", d) for d in shape]
    if len(dims) > lib.RF_MAX_RANK:
        raise ValueError(f"shape {tuple(shape)} has rank {len(dims)}; "
                         f"ringflow's ranks go up to {lib.RF_MAX_RANK}")
    s.rank = len(dims)
    for i, d in enumerate(dims):
        if d < -1:
            raise ValueError(f"shape {tuple(shape)}: dim {d} is negative")
        s.dims[i] = d
    return s[0]


def py_shape(s) -> Shape:
    """An rf_shape as a tuple (None for unknown dims), or None for an
    unknown rank."""
    if s.rank < 0:
        return None
    return tuple(None if s.dims[i] < 0 else int(s.dims[i])
                 for i in range(s.rank))


def as_array(value: Any, dtype: Any = None) -> np.ndarray:
    """`value` as an array of a ringflow dtype: `dtype` when given (converted
    by NumPy, except that a Python float or NumPy float scalar that is not
    a whole number is not truncated to an integer dtype: TypeError, as
    TensorFlow); else an
    array's own dtype, and for Python values TensorFlow's defaults
    (float32, int32 unless out of its range, then int64; past int64's range
    a TypeError), bool)."""
    python = not isinstance(value, (np.ndarray, np.generic))
    if dtype is not None:
        if dtype is dtypes.resource:
            raise TypeError("a constant cannot be of dtype resource (a "
                            "variable's handle holds no data)")
        dt = dtypes.as_dtype(dtype)
        if python:
            _check_numbers(value, dt)
        arr = np.asarray(value, dtype=dt)
        # a NumPy float scalar (np.float64 is a Python float) as a Python one
        scalar = isinstance(value, (np.floating, np.complexfloating))
        if (python or scalar) and dt.kind in "iu":
            given = np.asarray(value)
            if given.dtype.kind in "fc" and not np.array_equal(arr, given):
                raise TypeError(f"cannot make a {dt} tensor of "
                                f"{reprlib.repr(value)}: not whole numbers")
        return arr
    if not python:
        arr = np.asarray(value)
        # TypeError for dtypes ringflow lacks; another byte order: native
        return arr.astype(dtypes.as_dtype(arr.dtype), copy=False)
    arr = np.asarray(value)
    if arr.dtype.kind in "uifO":
        ints = _python_ints(value, arr)
        if ints is not None:
            return ints
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    if arr.dtype.kind == "b":
        return arr
    raise TypeError(f"cannot make a ringflow tensor of "
                    f"{reprlib.repr(value)} (NumPy reads it as {arr.dtype})")


def _check_numbers(value: Any, dt: np.dtype) -> None:
    """TypeError unless the Python value `value` is numbers: bools, ints,
    floats (nested lists of them). NumPy would read None as NaN and the
    string "2.5" as 2.5, "False" as True, for a dtype asked for."""
    kind = np.asarray(value).dtype.kind
    if kind in "biuf":
        return
    if kind == "O" and all(
            isinstance(x, (int, float, np.bool_, np.integer, np.floating))
            for x in np.asarray(value, dtype=object).ravel()):
        return  # ints past int64 (NumPy keeps them as objects)
    raise TypeError(f"cannot make a {dt} tensor of {reprlib.repr(value)}: "
                    f"not numbers (NumPy reads it as "
                    f"{np.asarray(value).dtype})")


_INT32 = np.iinfo(np.int32)
_INT64 = np.iinfo(np.int64)


def _python_ints(value: Any, arr: np.ndarray) -> Optional[np.ndarray]:
    """Python integers (NumPy's `arr` of them) as int32, or int64 when
    past int32's range; None when they are not all integers. NumPy reads
    ints past int64 as uint64, float64 or objects: TypeError."""
    if arr.dtype.kind == "i" and arr.dtype.itemsize <= 8:
        exact = arr  # NumPy held them all in int64: no search needed
    else:
        items = np.asarray(value, dtype=object).ravel()
        if not all(isinstance(x, (int, np.integer)) and
                   not isinstance(x, (bool, np.bool_)) for x in items):
            return None
        if items.size and (min(items) < _INT64.min or
                           max(items) > _INT64.max):
            raise TypeError(f"cannot make a ringflow tensor of "
                            f"{reprlib.repr(value)}: past int64's range")
        exact = np.asarray(value, dtype=object).astype(np.int64)
    small = exact.size == 0 or (exact.min() >= _INT32.min and
                                exact.max() <= _INT32.max)
    return exact.astype(np.int32 if small else np.int64)


def _c_contiguous(arr: np.ndarray) -> np.ndarray:
    """arr, or a C-contiguous aligned copy of it (np.ascontiguousarray
    would turn a 0-d array into a 1-d one)."""
    if arr.flags.c_contiguous and arr.flags.aligned:
        return arr
    return arr.copy(order="C")


def copy_to_c(arr: np.ndarray):
    """A new rf_tensor holding a copy of arr (owned by the returned cdata,
    released when it is collected)."""
    arr = _c_contiguous(arr)
    out = ffi.new("rf_tensor **")
    shape = ffi.new("rf_shape *", c_shape(arr.shape))
    check(lib.rf_tensor_new_copy(dtypes.to_c(arr.dtype), shape,
                                 _address(arr), out))
    return ffi.gc(out[0], lib.rf_tensor_release)


def _address(arr: np.ndarray):
    """arr's data as a void * (through the buffer protocol when NumPy
    offers it for the dtype, the cheaper way)."""
    try:
        return ffi.cast("void *", ffi.from_buffer(arr))
    except (TypeError, ValueError, BufferError):
        return ffi.cast("void *", arr.ctypes.data)


def feed_array(value: Any, dtype: np.dtype) -> Any:
    """A value fed to an output of `dtype` as an array a tensor can wrap
    (C-contiguous, aligned, of that dtype): a DLPack producer's memory (a
    CPU PyTorch tensor) through np.from_dlpack, a view; anything else as
    np.asarray(value, dtype) makes it, copied when not C-contiguous. A
    producer of GPU memory gives a dlpack.GpuTensor (fed as it is). The
    prepared runs of ringflow/_fastrun call it for values that are not
    such an array already."""
    if not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
        if dlpack.is_gpu_producer(value):
            return dlpack.from_dlpack(value)  # a GpuTensor, fed as it is
        # a view (no copy), of any dtype: converted below as np.asarray
        value = dlpack.host_array(value)
    return _c_contiguous(np.asarray(value, dtype=dtype))


def feed_to_c(value: Any, dtype: np.dtype, code: int):
    """An rf_tensor for a value fed to an output of `dtype` (rf_dtype
    `code`). An array of that dtype that is C-contiguous and aligned to its
    item size is wrapped, not copied (the tensor keeps it alive); so is a
    DLPack producer's memory (a CPU PyTorch tensor) taken through
    np.from_dlpack; anything else is converted to such an array first, as
    np.asarray(value, dtype) does. Owned by the returned cdata."""
    arr = value
    if not (type(value) is np.ndarray and value.dtype == dtype and
            value.flags.c_contiguous and value.flags.aligned):
        arr = feed_array(value, dtype)
        if isinstance(arr, dlpack.GpuTensor):
            return ffi.gc(lib.rf_tensor_retain(
                ffi.cast("rf_tensor *", arr._address)), lib.rf_tensor_release)
    if arr.ndim <= lib.RF_MAX_RANK:
        shape = ffi.new("rf_shape *", (arr.ndim, arr.shape))
    else:
        shape = ffi.new("rf_shape *", c_shape(arr.shape))  # ValueError
    out = ffi.new("rf_tensor **")
    key = next(_keys)
    _kept[key] = arr
    try:
        check(lib.rf_tensor_new_external(
            code, shape, _address(arr), lib._rf_py_release,
            ffi.cast("void *", key), out))
    except BaseException:
        del _kept[key]  # refused: the callback never fires
        raise
    return ffi.gc(out[0], lib.rf_tensor_release)


class _TensorMemory:
    """The memory of a fetched tensor, for np.asarray: the array's base,
    holding the tensor's reference until the last array over it goes."""

    __slots__ = ("_tensor", "__array_interface__")

    def __init__(self, tensor, typestr: str, shape: Sequence[int]) -> None:
        self._tensor = tensor
        data = int(ffi.cast("uintptr_t", lib.rf_tensor_data(tensor)))
        self.__array_interface__ = {
            "data": (data, True), "shape": tuple(shape),
            "typestr": typestr, "version": 3}


# rf_dtype -> (typestr of the array interface, the dtype to view it as).
_TYPESTR = {code: (("<u2", dt) if dt == dtypes.bfloat16 else (dt.str, None))
            for code, dt in dtypes._FROM_RF.items() if dt is not
            dtypes.resource}


def to_numpy(tensor) -> np.ndarray:
    """A read-only array over an rf_tensor's memory, without a copy. Takes
    over the caller's reference (`tensor` is a plain rf_tensor *)."""
    tensor = ffi.gc(tensor, lib.rf_tensor_release)
    typestr, view = _TYPESTR[lib.rf_tensor_dtype(tensor)]
    s = lib.rf_tensor_shape(tensor)
    arr = np.asarray(_TensorMemory(tensor, typestr, s.dims[0:s.rank]))
    # bfloat16 has no typestr of its own: its bits as uint16, viewed.
    return arr if view is None else arr.view(view)


def tensor_memory(arr: np.ndarray) -> Optional[int]:
    """The address of the rf_tensor (as an int) whose memory `arr` is,
    when arr was fetched (or came from to_numpy); None otherwise."""
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, _fastrun.TensorRef):
        return base.address
    if isinstance(base, _TensorMemory):
        return int(ffi.cast("uintptr_t", base._tensor))
    return None
