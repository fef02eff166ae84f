"""DLPack with GPU memory: a kDLCUDA producer's memory becomes a
ringflow.GpuTensor without a copy (rf_tensor_new_external_gpu), is fed to
GPU devices, exported again by __dlpack__, and given back to its producer
once. Without a GPU, a stand-in producer (host memory announced as CUDA
device memory, never read) checks the import, export, release and the CPU
device's refusal; with CUDA PyTorch and a GPU, the real round trip runs."""

import ctypes
import gc

import numpy as np
import pytest

import ringflow as rf
from ringflow import errors


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor),
                            ("manager_ctx", ctypes.c_void_p),
                            ("deleter", DELETER)]

NAME = b"dltensor"
capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
capsule_get.restype = ctypes.c_void_p
capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


# What an exported DLManagedTensor needs until its deleter runs (a real
# producer's manager_ctx), and the deleters' thunks (kept: one may not free
# itself while it runs).
_LIVE = {}
_THUNKS = []


class FakeCuda:
    """A producer announcing `arr`'s (host) memory as memory of CUDA device
    `gpu`; counts its deleter's calls and records the stream asked for."""

    def __init__(self, arr, gpu=0, code=2, strides=None):
        self.arr, self.gpu, self.code, self.strides = arr, gpu, code, strides
        self.deleted = 0
        self.stream = "not given"

    def __dlpack_device__(self):
        return (2, self.gpu)

    def __dlpack__(self, stream=None):
        self.stream = stream
        m = DLManagedTensor()
        shape = (ctypes.c_int64 * self.arr.ndim)(*self.arr.shape)
        t = m.dl_tensor
        t.data = self.arr.ctypes.data
        t.device = DLDevice(2, self.gpu)
        t.ndim = self.arr.ndim
        t.dtype = DLDataType(self.code, self.arr.itemsize * 8, 1)
        t.shape = shape
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * self.arr.ndim)(*self.strides)
            t.strides = strides
        key = ctypes.addressof(m)

        def deleter(_):
            self.deleted += 1
            del _LIVE[key]
        m.deleter = DELETER(deleter)
        _THUNKS.append(m.deleter)
        _LIVE[key] = (m, shape, strides, self)
        return capsule_new(key, NAME, None)


def exported(capsule):
    m = DLManagedTensor.from_address(capsule_get(capsule, NAME))
    t = m.dl_tensor
    return (t.data, (t.device.device_type, t.device.device_id),
            [t.shape[i] for i in range(t.ndim)],
            [t.strides[i] for i in range(t.ndim)],
            (t.dtype.code, t.dtype.bits, t.dtype.lanes))


def test_gpu_memory_crosses_without_a_copy():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    producer = FakeCuda(arr, gpu=3)
    gt = rf.from_dlpack(producer)
    assert isinstance(gt, rf.GpuTensor)
    assert producer.stream == 1  # ordered before the legacy default stream
    assert gt.shape == (2, 3) and gt.dtype == np.float32 and gt.gpu == 3
    assert "gpu=3" in repr(gt)
    assert gt.__dlpack_device__() == (2, 3)
    # Out again: the same memory, C-contiguous strides.
    capsule = gt.__dlpack__(stream=None)
    assert exported(capsule) == (arr.ctypes.data, (2, 3), [2, 3], [3, 1],
                                 (2, 32, 1))
    del capsule  # never consumed: deleted with the capsule
    gc.collect()
    assert producer.deleted == 0
    del gt
    gc.collect()
    assert producer.deleted == 1


def test_cpu_device_refuses_gpu_memory():
    x = rf.placeholder(rf.float32, (2, 3))
    y = rf.identity(x)
    producer = FakeCuda(np.ones((2, 3), np.float32))
    gt = rf.from_dlpack(producer)
    with rf.Session() as sess:
        for value in (gt, producer):  # a GpuTensor, or its producer fed
            with pytest.raises(errors.InvalidArgumentError) as e:
                sess.run(y, {x: value})
            assert "device tensor" in e.value.message
            assert "in host memory" in e.value.message
            assert x.op.name in e.value.node_name  # its _Arg node
        f = sess.make_callable(y, [x])
        with pytest.raises(errors.InvalidArgumentError):
            f(gt)
        np.testing.assert_array_equal(f(np.ones((2, 3), np.float32)),
                                      np.ones((2, 3)))
    del gt, f
    gc.collect()
    assert producer.deleted == 2  # each import given back once


def test_gpu_memory_refused_kinds():
    strided = FakeCuda(np.zeros((2, 3), np.float32), strides=(1, 2))
    with pytest.raises(BufferError, match="not C-contiguous"):
        rf.from_dlpack(strided)
    complex_kind = FakeCuda(np.zeros(4, np.float64), code=5)
    with pytest.raises(TypeError, match="no ringflow dtype"):
        rf.from_dlpack(complex_kind)
    # Not taken: the capsules were never consumed (a producer's own
    # capsule destructor would delete them; this stand-in has none).
    assert strided.deleted == complex_kind.deleted == 0


def cuda_torch():
    try:
        import torch
    except ImportError:
        pytest.skip("GPU DLPack tests skipped: no PyTorch to make CUDA "
                    "tensors")
    if not torch.cuda.is_available():
        pytest.skip("GPU DLPack tests skipped: PyTorch sees no CUDA device")
    try:
        rf.Session(rf.Graph(), gpu_devices=1).close()
    except errors.FailedPreconditionError as e:
        pytest.skip(f"GPU DLPack tests skipped: {e.message}")
    return torch


def test_torch_cuda_round_trip():
    torch = cuda_torch()
    with rf.device("gpu:0"):
        x = rf.placeholder(rf.float32, (3, 4))
        y = x * 2.0
    t = torch.arange(12, dtype=torch.float32, device="cuda:0").reshape(3, 4)
    t = t + 1  # written on PyTorch's stream just before
    gt = rf.from_dlpack(t)
    assert gt.gpu == 0 and gt.shape == (3, 4)
    back = torch.from_dlpack(gt)
    assert back.data_ptr() == t.data_ptr() and back.device == t.device
    with rf.Session(gpu_devices=1) as sess:
        want = 2 * (np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
        np.testing.assert_array_equal(sess.run(y, {x: gt}), want)
        np.testing.assert_array_equal(sess.run(y, {x: t}), want)
