"""Defects found from outside (session 33), each against the PYTHON.md line
it broke: NumPy float scalars meeting integer tensors, and device names that
are not strings."""

import numpy as np
import pytest

import ringflow as rf


@pytest.mark.parametrize("scalar", [np.float64(0.5), np.float32(2.5),
                                    np.float16(-1.5)])
def test_numpy_float_scalar_is_not_truncated(scalar):
    # np.float64 is a Python float: `int_tensor * lr` must not be zeros
    ti = rf.constant(np.array([1, 2], np.int32))
    with pytest.raises(TypeError, match="not whole numbers"):
        ti * scalar
    with pytest.raises(TypeError, match="not whole numbers"):
        rf.constant(scalar, dtype=rf.int32)


def test_whole_numpy_float_scalar_and_arrays_convert():
    ti = rf.constant(np.array([1, 2], np.int32))
    y = ti * np.float64(3.0)
    z = rf.constant(np.array(0.5), dtype=rf.int32)  # arrays: astype
    w = rf.constant(np.array([0.5, 1.5]), dtype=rf.int64)
    with rf.Session() as s:
        got_y, got_z, got_w = s.run([y, z, w])
    assert got_y.dtype == np.int32 and got_y.tolist() == [3, 6]
    assert got_z == 0 and got_w.tolist() == [0, 1]


@pytest.mark.parametrize("name", [0, False, [], 1, 0.0])
def test_device_name_must_be_a_string(name):
    with pytest.raises(TypeError, match="must be a str"):
        with rf.device(name):
            pass
    with pytest.raises(TypeError, match="must be a str"):
        with rf.get_default_graph().device(name):
            pass


def test_device_none_and_empty_mean_none():
    for name in (None, ""):
        with rf.device(name):
            t = rf.constant(1.0)
        assert t.device == ""
