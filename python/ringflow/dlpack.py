"""DLPack on CPU: arrays of other libraries (PyTorch, JAX, CuPy's host
arrays, NumPy) cross into ringflow without a copy, and fetched arrays
cross out.

A value with `__dlpack__` fed to Session.run is taken through
np.from_dlpack, a view of the producer's memory, which the fed tensor then
wraps (no copy when it is C-contiguous and of the placeholder's dtype).
Fetched arrays are NumPy arrays, which export DLPack themselves: they are
read-only, so consumers must accept DLPack 1.0's read-only flag
(np.from_dlpack does; PyTorch may copy or refuse). Device memory (a GPU
tensor) is not taken yet: np.from_dlpack refuses it.
"""

from typing import Any

import numpy as np

__all__ = ["from_dlpack"]


def from_dlpack(x: Any) -> np.ndarray:
    """A NumPy array over the memory of `x`, an object with `__dlpack__`
    (a PyTorch CPU tensor, a JAX CPU array, a NumPy array), without a copy:
    a value to feed. Raises TypeError for an object without `__dlpack__`,
    and the producer's or NumPy's error (BufferError, RuntimeError) for
    memory NumPy cannot view (a GPU device's)."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"{type(x).__name__} has no __dlpack__")
    return np.from_dlpack(x)
