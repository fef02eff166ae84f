"""DLPack: arrays of other libraries (PyTorch, JAX, CuPy, NumPy) cross into
ringflow without a copy, and back out.

Host memory: a value with `__dlpack__` fed to Session.run is taken through
np.from_dlpack, a view of the producer's memory, which the fed tensor then
wraps (no copy when it is C-contiguous and of the placeholder's dtype);
bfloat16, which NumPy's DLPack lacks, as uint16 viewed as
ml_dtypes.bfloat16.
Fetched arrays are NumPy arrays, which export DLPack themselves: they are
read-only, so consumers must accept DLPack 1.0's read-only flag
(np.from_dlpack does; PyTorch may copy or refuse). bfloat16 ones do not
(NumPy's DLPack has no bfloat16: BufferError); a.view(np.uint16) exports
the bits.

GPU memory (a kDLCUDA producer: a CUDA PyTorch tensor, a CuPy array):
from_dlpack gives a GpuTensor over it (rf_tensor_new_external_gpu), without
a copy. Fed to a placeholder on a GPU device, the device copies it into its
own memory on its stream (device to device), after the work the producer
ordered before the GPU's legacy default stream (from_dlpack asks for that,
stream=1). A GpuTensor exports the same memory again through __dlpack__ and
__dlpack_device__. Fetches still come back as host arrays.
"""

from typing import Any, Union

import numpy as np

from ringflow import _fastrun, dtypes

__all__ = ["from_dlpack", "GpuTensor"]

KDL_CUDA = 2  # DLPack's DLDeviceType for CUDA device memory


class GpuTensor(_fastrun.GpuTensor):
    """A tensor in a GPU's memory, made by from_dlpack without a copy; it
    keeps the producer's memory alive (the producer's deleter runs when the
    last reference, a session's included, goes).

    shape: a tuple; dtype: the NumPy dtype; gpu: the physical GPU (the
    producer's device index). Feed it to a placeholder on a GPU device;
    a CPU device's placeholder refuses it (InvalidArgumentError). Other
    libraries take it back with their from_dlpack (torch.from_dlpack), the
    same memory. The library never writes it.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return (f"<ringflow.GpuTensor shape={self.shape} "
                f"dtype={self.dtype} gpu={self.gpu}>")


class _Capsule:
    """A DLPack capsule already made, as a producer for np.from_dlpack."""

    __slots__ = ("_capsule",)

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> Any:
        return (1, 0)  # kDLCPU


def is_gpu_producer(x: Any) -> bool:
    """Whether `x` exports CUDA device memory through DLPack."""
    device = getattr(x, "__dlpack_device__", None)
    return device is not None and device()[0] == KDL_CUDA


def host_array(x: Any) -> np.ndarray:
    """A NumPy array over the host memory `x` (a DLPack producer of CPU
    memory) exports, without a copy, whatever its dtype."""
    if isinstance(x, np.ndarray) and x.dtype == dtypes.bfloat16:
        # NumPy's own __dlpack__ refuses bfloat16 arrays: the array itself.
        return x.view()
    try:
        return np.from_dlpack(x)
    except (RuntimeError, BufferError, TypeError):
        # NumPy has no bfloat16: the same bits as uint16, viewed.
        capsule = x.__dlpack__()
        if not _fastrun.bfloat16_as_uint16(capsule):
            raise
        return np.from_dlpack(_Capsule(capsule)).view(dtypes.bfloat16)


def from_dlpack(x: Any) -> Union[np.ndarray, GpuTensor]:
    """The memory of `x`, an object with `__dlpack__`, without a copy: a
    NumPy array over host memory (a PyTorch or JAX CPU tensor, a NumPy
    array), or a GpuTensor over CUDA device memory (a CUDA PyTorch tensor).
    Either is a value to feed. Raises TypeError for an object without
    `__dlpack__` or of a dtype ringflow lacks, BufferError for memory
    neither can take (another device kind, a strided GPU tensor), and the
    producer's errors."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"{type(x).__name__} has no __dlpack__")
    if not is_gpu_producer(x):
        arr = host_array(x)
        dtypes.as_dtype(arr.dtype)  # TypeError for a dtype ringflow lacks
        return arr
    try:
        capsule = x.__dlpack__(stream=1)  # ordered before the legacy stream
    except TypeError:  # a producer that takes no stream
        capsule = x.__dlpack__()
    return _fastrun.gpu_tensor_from_capsule(capsule, dtypes._FROM_RF,
                                            GpuTensor)
