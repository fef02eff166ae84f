"""Feeds and fetches without copies, shown by address: a fed C-contiguous
array of the placeholder's dtype becomes the tensor (rf_tensor_new_external)
and a fetched array is the tensor's memory, keeping the tensor alive; the
library never writes a fed array."""

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

import ringflow as rf
from ringflow import _convert
from ringflow._lib import ffi, lib


def address(arr):
    return arr.__array_interface__["data"][0]


def tensor_data(arr):
    """The data address of the C tensor the fetched array is over."""
    t = ffi.cast("rf_tensor *", _convert.tensor_memory(arr))
    return int(ffi.cast("uintptr_t", lib.rf_tensor_data(t)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64,
                                   ml_dtypes.bfloat16, np.bool_])
def test_feed_and_fetch_share_the_array(dtype):
    """The fed array comes back through the placeholder, an Identity on
    another device and a Reshape (a view): the same memory each time."""
    with rf.device("cpu:0"):
        x = rf.placeholder(dtype, (4, 6))
    with rf.device("cpu:1"):
        same = rf.identity(x)
        flat = rf.reshape(x, [-1])
    value = np.arange(24).reshape(4, 6).astype(dtype)
    with rf.Session(cpu_devices=2) as sess:
        got_x, got_same, got_flat = sess.run([x, same, flat], {x: value})
    for got in (got_x, got_same, got_flat):
        assert address(got) == address(value) == tensor_data(got)
    assert got_flat.shape == (24,) and got_flat.dtype == dtype
    np.testing.assert_array_equal(got_same, value)


def test_fetched_array_is_the_tensor_and_keeps_it_alive():
    """A computed result: the array is the tensor's memory, read-only, and
    stays valid after the session and graph are gone."""
    with rf.Graph().as_default() as g:
        x = rf.placeholder(rf.float32, (1000,))
        y = x * 2.0
        sess = rf.Session(g)
        got = sess.run(y, {x: np.arange(1000, dtype=np.float32)})
    assert address(got) == tensor_data(got)
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0] = 1.0
    sess.close()
    del sess, g, x, y
    gc.collect()
    np.testing.assert_array_equal(got, 2 * np.arange(1000))
    copy = np.array(got)
    copy[0] = 5.0  # a copy is the user's


def test_fed_array_lives_as_long_as_its_tensor():
    """The tensor over a fed array holds it: fetched back, the array stays
    alive after the caller drops it, until the fetched array goes too."""
    x = rf.placeholder(rf.float64, (8,))
    y = rf.identity(x)
    value = np.linspace(0, 1, 8)
    alive = weakref.ref(value)
    with rf.Session() as sess:
        got = sess.run(y, {x: value})
    del value
    gc.collect()
    assert alive() is not None
    np.testing.assert_array_equal(got, np.linspace(0, 1, 8))
    del got
    gc.collect()
    assert alive() is None


def test_fetched_array_fed_back_is_not_copied():
    x = rf.placeholder(rf.float32, (16,))
    y = x + 1.0
    with rf.Session() as sess:
        first = sess.run(y, {x: np.zeros(16, np.float32)})
        second = sess.run(rf.get_default_graph().get_tensor_by_name(
            x.name), {x: first})
    assert address(second) == address(first)


def test_other_arrays_are_converted():
    """Another dtype, a strided view or a Python list: converted (a copy),
    with the right values."""
    x = rf.placeholder(rf.float32, (3,))
    base = np.arange(6, dtype=np.float32)
    with rf.Session() as sess:
        strided = sess.run(x, {x: base[::2]})
        other = sess.run(x, {x: np.array([1, 2, 3], np.int64)})
        listed = sess.run(x, {x: [1.5, 2.5, 3.5]})
    assert address(strided) != address(base)
    np.testing.assert_array_equal(strided, [0, 2, 4])
    assert other.dtype == np.float32
    np.testing.assert_array_equal(other, [1, 2, 3])
    np.testing.assert_array_equal(listed, [1.5, 2.5, 3.5])


def test_library_never_writes_a_fed_array():
    """A variable assigned a fed array and then updated writes a copy; the
    array keeps its values (the variable held the only reference to the
    tensor, which for library memory means an update in place)."""
    init = rf.placeholder(rf.float32, (4,))
    v = rf.Variable(np.zeros(4, np.float32))
    assign = v.assign(init)
    step = rf.apply_gradient_descent(v, 1.0, np.ones(4, np.float32))
    value = np.full(4, 10.0, np.float32)
    with rf.Session() as sess:
        sess.run(assign, {init: value})
        sess.run(step)
        np.testing.assert_array_equal(sess.run(v), [9, 9, 9, 9])
    np.testing.assert_array_equal(value, [10, 10, 10, 10])


def test_64_mib_without_a_copy():
    """64 MiB in and out: the fetched array is the fed memory."""
    x = rf.placeholder(rf.float32, (16 << 20,))
    y = rf.identity(x)
    value = np.zeros(16 << 20, np.float32)
    with rf.Session() as sess:
        got = sess.run(y, {x: value})
    assert got.nbytes == 64 << 20 and address(got) == address(value)
