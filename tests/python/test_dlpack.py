"""DLPack round trips on CPU, by address: into a feed and out of a fetch
with NumPy, and with PyTorch when it is installed."""

import ctypes
import gc

import ml_dtypes
import numpy as np
import pytest

import ringflow as rf


def address(arr):
    return arr.__array_interface__["data"][0]


class Producer:
    """A DLPack producer that is not an ndarray (as a foreign library's
    tensor would be)."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_numpy_round_trip():
    x = rf.placeholder(rf.float32, (2, 5))
    y = rf.identity(x)
    source = np.arange(10, dtype=np.float32).reshape(2, 5)
    view = rf.from_dlpack(Producer(source))
    assert address(view) == address(source)
    with rf.Session() as sess:
        fed_direct = sess.run(y, {x: Producer(source)})
        fed_view = sess.run(y, {x: view})
    assert address(fed_direct) == address(fed_view) == address(source)
    # Out: a fetched (read-only) array exports DLPack 1.0 without a copy.
    back = np.from_dlpack(fed_direct)
    assert address(back) == address(source) and not back.flags.writeable
    np.testing.assert_array_equal(back, source)


def test_from_dlpack_refuses_other_objects():
    with pytest.raises(TypeError, match="no __dlpack__"):
        rf.from_dlpack([1, 2, 3])


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    x = rf.placeholder(rf.float32, (3, 4))
    y = x * 2.0
    same = rf.identity(x)
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    with rf.Session() as sess:
        doubled, echoed = sess.run([y, same], {x: t})
    assert address(echoed) == t.data_ptr()
    np.testing.assert_array_equal(doubled, 2 * t.numpy())
    # Out to PyTorch: a view when it takes read-only DLPack, else a copy.
    try:
        back = torch.from_dlpack(doubled)
    except (BufferError, RuntimeError) as e:
        pytest.skip(f"this PyTorch refuses read-only DLPack: {e}")
    np.testing.assert_array_equal(back.numpy(), doubled)


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManaged))
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class BFloat16Producer:
    """A host DLPack producer of bfloat16 (kDLBfloat, as a CPU PyTorch or
    JAX tensor exports it), which NumPy cannot read by itself. Its deleter
    counts the capsules consumed."""

    def __init__(self, arr):
        self.arr = arr  # bfloat16, C-contiguous
        self.shape = (ctypes.c_int64 * arr.ndim)(*arr.shape)
        self.deleted = 0
        self._keep = []

        def deleter(_):
            self.deleted += 1
        self._deleter = _DELETER(deleter)

    def __dlpack__(self, **kwargs):
        m = _DLManaged()
        m.dl_tensor.data = self.arr.ctypes.data
        m.dl_tensor.device_type = 1  # kDLCPU
        m.dl_tensor.ndim = self.arr.ndim
        m.dl_tensor.code, m.dl_tensor.bits, m.dl_tensor.lanes = 4, 16, 1
        m.dl_tensor.shape = self.shape
        m.deleter = ctypes.cast(self._deleter, ctypes.c_void_p)
        self._keep.append(m)
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)

    def __dlpack_device__(self):
        return (1, 0)


def test_host_bfloat16_producer_is_fed_without_a_copy():
    """A host DLPack producer of bfloat16 (np.from_dlpack has no bfloat16:
    it raised RuntimeError 'Unsupported dtype in DLTensor') is a bfloat16
    array over its memory, fed without a copy; its deleter runs once the
    last reference goes."""
    source = (np.arange(6, dtype=np.float32) - 2.5).astype(
        ml_dtypes.bfloat16).reshape(2, 3)
    producer = BFloat16Producer(source)
    view = rf.from_dlpack(producer)
    assert view.dtype == rf.bfloat16 and view.shape == (2, 3)
    assert address(view) == address(source)
    x = rf.placeholder(rf.bfloat16, (2, 3))
    y = rf.identity(x)
    with rf.Session() as sess:
        echoed = sess.run(y, {x: producer})
    assert address(echoed) == address(source)
    np.testing.assert_array_equal(echoed, source)
    del view, echoed
    gc.collect()
    assert producer.deleted == 2


def test_torch_bfloat16_feed():
    torch = pytest.importorskip("torch")
    t = torch.linspace(-2, 2, 12, dtype=torch.bfloat16).reshape(3, 4)
    x = rf.placeholder(rf.bfloat16, (3, 4))
    y = rf.identity(x)
    with rf.Session() as sess:
        echoed = sess.run(y, {x: t})
    assert address(echoed) == t.data_ptr()
    np.testing.assert_array_equal(echoed.view(np.uint16),
                                  t.view(torch.int16).numpy().view(np.uint16))
