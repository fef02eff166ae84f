"""ringflow.array_ops (transpose, concat, split, slice, expand_dims,
squeeze, pad, tile, gather, one_hot, where) against NumPy on random data
of several dtypes, gradients against NumPy's adjoints in float64, and the
errors."""

import math

import numpy as np
import pytest

import ringflow as rf

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]


def _data(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _run(fetches, feeds):
    with rf.Session() as sess:
        return sess.run(fetches, feeds)


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_against_numpy(dtype, rng):
    x = _data(rng, (2, 1, 3), dtype)
    y = _data(rng, (2, 4, 3), dtype)
    px = rf.placeholder(x.dtype, (None, None, 3))
    py = rf.placeholder(y.dtype, y.shape)
    got = _run([
        rf.transpose(px, [2, 0, 1]),
        rf.transpose(px),
        rf.concat([px, py], axis=-2),
        rf.slice(py, [1, 1, 0], [-1, 2, 2]),
        rf.expand_dims(px, 0),
        rf.squeeze(px),
        rf.squeeze(px, axis=[1]),
        rf.pad(px, [[0, 1], [2, 0], [1, 1]], constant_values=1),
        rf.tile(px, [2, 3, 0]),
    ] + rf.split(py, [1, -1, 2], axis=1) + rf.split(py, 2, axis=1),
        {px: x, py: y})
    want = [
        np.transpose(x, [2, 0, 1]), np.transpose(x),
        np.concatenate([x, y], axis=-2), y[1:, 1:3, 0:2],
        np.expand_dims(x, 0), np.squeeze(x), np.squeeze(x, axis=1),
        np.pad(x, [[0, 1], [2, 0], [1, 1]], constant_values=1),
        np.tile(x, [2, 3, 0]),
    ] + np.split(y, [1, 2], axis=1) + np.split(y, 2, axis=1)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_static_shapes():
    x = rf.placeholder(rf.float32, (2, None, 3))
    assert rf.transpose(x, [2, 0, 1]).shape == (3, 2, None)
    assert rf.pad(x, [[1, 1], [0, 0], [0, 2]]).shape == (4, None, 5)
    assert rf.tile(x, [1, 2, 3]).shape == (2, None, 9)
    assert rf.expand_dims(x, -1).shape == (2, None, 3, 1)
    assert [t.shape for t in rf.split(x, 3, axis=2)] == [(2, None, 1)] * 3


def test_gradients_against_numpy(rng):
    x = rng.standard_normal((2, 3, 1))
    px = rf.placeholder(rf.float64, x.shape)
    parts = rf.split(rf.tile(rf.transpose(px, [1, 0, 2]), [1, 1, 2]), 3,
                     axis=0)
    y = rf.concat([rf.pad(rf.squeeze(parts[2], [0]), [[0, 0], [1, 0]]),
                   rf.slice(rf.squeeze(parts[0], [0]), [0, 1], [2, 1])],
                  axis=1)
    r = rng.standard_normal((2, 4))
    (dx,) = rf.gradients([rf.reduce_sum(y * r)], [px])
    got = _run(dx, {px: x})
    # The adjoint by hand: y = [pad(t[2]) | t[0][:, 1:2]], t = tile(x^T).
    dt = np.zeros((3, 2, 2))
    dt[2] += r[:, 1:3]
    dt[0][:, 1:2] += r[:, 3:4]
    want = np.transpose(dt.sum(axis=2, keepdims=True), [1, 0, 2])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_errors():
    x = rf.placeholder(rf.float32, (2, 3))
    with pytest.raises(rf.errors.InvalidArgumentError, match="Transpose"):
        rf.transpose(x, [0, 0])
    with pytest.raises(rf.errors.InvalidArgumentError, match="evenly"):
        rf.split(x, 2, axis=1)
    with pytest.raises(rf.errors.InvalidArgumentError, match="outside"):
        rf.slice(x, [0, 2], [1, 2])
    with pytest.raises(NotImplementedError):
        rf.pad(x, [[0, 0], [1, 1]], mode="REFLECT")
    with pytest.raises(ValueError):
        rf.pad(x, [0, 1])
    y = rf.placeholder(rf.float32, None)
    s = rf.slice(y, [0, 2], [1, 2])
    with rf.Session() as sess:
        with pytest.raises(rf.errors.InvalidArgumentError, match="Slice"):
            sess.run(s, {y: np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_one_hot_where(dtype, rng):
    p = _data(rng, (5, 3), dtype)
    idx = rng.integers(0, 5, (2, 4)).astype(np.int32)
    c = rng.integers(0, 2, (2, 1)).astype(bool)
    x = _data(rng, (3,), dtype)
    y = _data(rng, (2, 3), dtype)
    pp = rf.placeholder(p.dtype, p.shape)
    got = _run([rf.gather(pp, idx), rf.gather(pp, idx[0] % 3, axis=-1),
                rf.one_hot(idx, 6, dtype=dtype),
                rf.one_hot(idx, 4, on_value=5, off_value=2, axis=0,
                           dtype=dtype),
                rf.where(c, x, y)], {pp: p})
    eye = np.eye(6, dtype=dtype)
    oh = np.where(np.arange(4)[:, None, None] == idx[None], 5, 2)
    want = [p[idx], np.take(p, idx[0] % 3, axis=-1), eye[idx],
            oh.astype(dtype), np.where(c, x, y)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_gather_where_gradients(rng):
    p = rng.standard_normal((4, 2))
    idx = np.array([3, 0, 3], np.int64)
    pp = rf.placeholder(rf.float64, p.shape)
    r = rng.standard_normal((3, 2))
    (dp,) = rf.gradients([rf.reduce_sum(rf.gather(pp, idx) * r)], [pp])
    want = np.zeros_like(p)
    np.add.at(want, idx, r)
    np.testing.assert_allclose(_run(dp, {pp: p}), want, rtol=1e-12)
    c = rng.integers(0, 2, (2, 1)).astype(bool)
    x = rf.placeholder(rf.float64, (3,))
    y = rf.placeholder(rf.float64, (2, 3))
    r2 = rng.standard_normal((2, 3))
    dx, dy = rf.gradients([rf.reduce_sum(rf.where(c, x, y) * r2)], [x, y])
    gx, gy = _run([dx, dy], {x: np.zeros(3), y: np.zeros((2, 3))})
    np.testing.assert_allclose(gx, np.where(c, r2, 0).sum(axis=0))
    np.testing.assert_allclose(gy, np.where(c, 0, r2))


def test_gather_out_of_range():
    p = rf.placeholder(rf.float32, (3, 2))
    i = rf.placeholder(rf.int32, (2,))
    y = rf.gather(p, i, name="emb")
    with rf.Session() as sess:
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match=r"emb.*indices\[1\] = 3"):
            sess.run(y, {p: np.zeros((3, 2), np.float32),
                         i: np.array([0, 3], np.int32)})
    with pytest.raises(NotImplementedError):
        rf.where(True)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False),
                                   (False, True), (True, True)])
def test_batched_matmul(ta, tb, rng):
    a = rng.standard_normal((2, 1, 3, 4))
    b = rng.standard_normal((3, 4, 5))
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    pa = rf.placeholder(rf.float64, a.shape)
    pb = rf.placeholder(rf.float64, b.shape)
    z = rf.matmul(pa, pb, transpose_a=ta, transpose_b=tb)
    assert z.op.type == "BatchMatMul"
    assert z.shape == (2, 3, 3, 5)
    r = rng.standard_normal(z.shape)
    da, db = rf.gradients([rf.reduce_sum(z * r)], [pa, pb])
    got, ga, gb = _run([z, da, db], {pa: a, pb: b})
    op_a = np.swapaxes(a, -1, -2) if ta else a
    op_b = np.swapaxes(b, -1, -2) if tb else b
    np.testing.assert_allclose(got, op_a @ op_b, rtol=1e-12, atol=1e-14)
    # adjoints by hand, summed over the broadcast batch dims
    want_a = (r @ np.swapaxes(op_b, -1, -2)).sum(axis=1, keepdims=True)
    want_b = (np.swapaxes(op_a, -1, -2) @ r).sum(axis=0)
    np.testing.assert_allclose(ga, np.swapaxes(want_a, -1, -2) if ta
                               else want_a, rtol=1e-10)
    np.testing.assert_allclose(gb, np.swapaxes(want_b, -1, -2) if tb
                               else want_b, rtol=1e-10)
    # rank 2 stays MatMul
    assert rf.matmul(rf.placeholder(rf.float32, (2, 3)),
                     rf.placeholder(rf.float32, (3, 4))).op.type == "MatMul"


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_batched_matmul_integers(dtype, rng):
    """Integer batches multiply exactly (the C tests cover wrapping)."""
    a = rng.integers(-1000, 1000, (2, 1, 3, 4), dtype=dtype)
    b = rng.integers(-1000, 1000, (3, 4, 5), dtype=dtype)
    z = rf.matmul(rf.constant(a), rf.constant(b))
    assert z.op.type == "BatchMatMul" and z.dtype == dtype
    np.testing.assert_array_equal(_run([z], {})[0], a @ b)


def _gelu_np(x, approximate):
    if approximate:
        c = np.sqrt(2 / np.pi)
        return 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_and_softmax_axis(approximate, rng):
    x = rng.standard_normal((2, 3, 4))
    px = rf.placeholder(rf.float64, x.shape)
    y = rf.gelu(px, approximate=approximate)
    sm = rf.nn.softmax(px, axis=1)
    (dx,) = rf.gradients([rf.reduce_sum(y)], [px])
    got, gsm, gdx = _run([y, sm, dx], {px: x})
    # atol: near x = -3 GELU is ~1e-3 and rounding differences of the two
    # formulas are a few ulps of the terms, not of the small result
    np.testing.assert_allclose(got, _gelu_np(x, approximate), rtol=1e-13,
                               atol=1e-15)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(gsm, e / e.sum(axis=1, keepdims=True),
                               rtol=1e-12)
    h = 1e-6
    fd = (_gelu_np(x + h, approximate) -
          _gelu_np(x - h, approximate)) / (2 * h)
    np.testing.assert_allclose(gdx, fd, rtol=1e-6, atol=1e-8)


def test_dropout(rng):
    x = rng.uniform(0.5, 2, (64, 64))
    px = rf.placeholder(rf.float64, x.shape)
    y = rf.dropout(px, 0.5, seed=3)
    (dx,) = rf.gradients([rf.reduce_sum(y)], [px])
    with rf.Session() as sess:
        a, mask, g = sess.run([y, y.op.outputs[1], dx], {px: x})
        b = sess.run(y, {px: x})
    assert set(np.unique(mask)) <= {0.0, 2.0}
    np.testing.assert_array_equal(a, x * mask)
    np.testing.assert_array_equal(g, mask)
    assert 0.4 < (mask > 0).mean() < 0.6
    assert not np.array_equal(a, b)  # the next step drops others
    with rf.Session() as sess:  # a new session replays step 1
        np.testing.assert_array_equal(sess.run(y, {px: x}), a)


def test_nn_aliases(rng):
    """rf.nn.gelu and rf.nn.dropout, as tf.nn has them: the same ops."""
    x = rng.uniform(0.5, 2, (8, 8))
    px = rf.placeholder(rf.float64, x.shape)
    y = rf.nn.gelu(px, approximate=True)
    d = rf.nn.dropout(px, 0.25, seed=5)
    assert y.op.type == "Gelu" and d.op.type == "Dropout"
    got, mask = _run([y, d.op.outputs[1]], {px: x})
    np.testing.assert_allclose(got, _gelu_np(x, True), rtol=1e-13)
    assert set(np.unique(mask)) <= {0.0, 1 / 0.75}


def _layer_norm_np(x, gamma, beta, eps):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * gamma + beta


@pytest.mark.parametrize("shape", [(2, 3, 5), (4, 1), (0, 6)])
def test_layer_norm(shape, rng):
    x = rng.standard_normal(shape)
    c = shape[-1]
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    r = rng.standard_normal(shape)
    px = rf.placeholder(rf.float64, shape)
    pg = rf.placeholder(rf.float64, (c,))
    pb = rf.placeholder(rf.float64, (c,))
    y = rf.layer_norm(px, pg, pb, epsilon=1e-3)
    assert y.op.type == "LayerNorm"
    grads = rf.gradients([rf.reduce_sum(y * r)], [px, pg, pb])
    feed = {px: x, pg: gamma, pb: beta}
    got, *g = _run([y] + grads, feed)
    np.testing.assert_allclose(got, _layer_norm_np(x, gamma, beta, 1e-3),
                               rtol=1e-12, atol=1e-12)
    h = 1e-6
    for k, a in enumerate((x, gamma, beta)):
        fd = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            args = [x, gamma, beta]
            lo, hi = a.copy(), a.copy()
            lo[i] -= h
            hi[i] += h
            args[k] = hi
            f1 = (_layer_norm_np(*args, 1e-3) * r).sum()
            args[k] = lo
            f0 = (_layer_norm_np(*args, 1e-3) * r).sum()
            fd[i] = (f1 - f0) / (2 * h)
        np.testing.assert_allclose(g[k], fd, rtol=1e-6, atol=1e-8)


def test_layer_norm_errors():
    px = rf.placeholder(rf.float32, (2, 3))
    with pytest.raises(rf.errors.InvalidArgumentError, match="gamma"):
        rf.layer_norm(px, np.ones(4, np.float32), np.zeros(3, np.float32))


def test_strided_slice_matches_numpy(rng):
    a = rng.standard_normal((4, 1, 6))
    x = rf.placeholder(rf.float64, (4, 1, 6))
    y = rf.strided_slice(x, [-1, 0, 1], [0, 1, 100], [-2, 1, 2])
    full = rf.strided_slice(x, [0, 0], [0, 0], None, begin_mask=3,
                            end_mask=1)
    one = rf.strided_slice(x, [2, 0, -1], [0, 0, 0], [1, 1, 1],
                           end_mask=0b010, shrink_axis_mask=0b101)
    empty = rf.strided_slice(x, [3], [1], [1])
    dx, = rf.gradients(rf.reduce_sum(y * 2.0), [x])
    with rf.Session() as sess:
        got = sess.run([y, full, one, empty, dx], {x: a})
    np.testing.assert_array_equal(got[0], a[-1:0:-2, 0:1, 1:100:2])
    np.testing.assert_array_equal(got[1], a[:, :0])
    np.testing.assert_array_equal(got[2], a[2, :, -1])
    assert got[3].shape == (0, 1, 6)
    want = np.zeros_like(a)
    want[-1:0:-2, 0:1, 1:100:2] = 2.0
    np.testing.assert_array_equal(got[4], want)


def test_strided_slice_errors():
    x = rf.placeholder(rf.float32, (2, 3))
    with pytest.raises(rf.errors.InvalidArgumentError, match="stride 0"):
        rf.strided_slice(x, [0], [1], [0])
    with pytest.raises(ValueError, match="entries"):
        rf.strided_slice(x, [0, 1], [1], [1])


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2])
def test_one_hot_every_axis(axis, rng):
    """docs/PYTHON.md: the new dim goes at `axis` of the output, in
    [-(r+1), r] for indices of rank r, negative counting from the output's
    end (as expand_dims); indices outside [0, depth) are all off."""
    idx = rng.integers(-1, 5, (2, 3)).astype(np.int64)
    got = _run(rf.one_hot(idx, 4, on_value=3, off_value=-1, axis=axis,
                          dtype=rf.int32), {})
    hot = np.where(idx[..., None] == np.arange(4), 3, -1).astype(np.int32)
    want = np.moveaxis(hot, -1, axis)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [-4, 3])
def test_one_hot_axis_out_of_range(axis):
    idx = rf.placeholder(rf.int32, (2, 3))
    with pytest.raises(rf.errors.InvalidArgumentError, match="axis"):
        rf.one_hot(idx, 4, axis=axis)
