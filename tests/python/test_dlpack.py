"""DLPack round trips on CPU, by address: into a feed and out of a fetch
with NumPy, and with PyTorch when it is installed."""

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
