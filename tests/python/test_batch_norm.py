"""ringflow.batch_norm and ringflow.sync_batch_norm against NumPy float64:
training values, gradients against finite differences, the moving
averages after steps and inference with them, synchronized batch norm over
4 CPU devices against one device over the whole batch, and the errors."""

import numpy as np
import pytest

import ringflow as rf


def _bn_np(x, gamma, beta, eps, mean=None, var=None):
    axes = tuple(range(x.ndim - 1))
    if mean is None:
        mean = x.mean(axis=axes)
        var = ((x - mean) ** 2).mean(axis=axes)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta, mean, var


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 2, 4), (1, 5), (6, 1)])
def test_training_values_and_gradients(shape, rng):
    x = rng.standard_normal(shape)
    c = shape[-1]
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    r = rng.standard_normal(shape)
    px = rf.placeholder(rf.float64, shape)
    pg = rf.placeholder(rf.float64, (c,))
    pb = rf.placeholder(rf.float64, (c,))
    res = rf.batch_norm(px, pg, pb, epsilon=1e-2)
    assert res.y.op.type == "BatchNorm" and res.update is None
    grads = rf.gradients([rf.reduce_sum(res.y * r)], [px, pg, pb])
    with rf.Session() as sess:
        y, m, v, *g = sess.run([res.y, res.mean, res.variance] + grads,
                               {px: x, pg: gamma, pb: beta})
    want, wm, wv = _bn_np(x, gamma, beta, 1e-2)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m, wm, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v, wv, rtol=1e-12, atol=1e-12)
    h = 1e-6
    for k, a in enumerate((x, gamma, beta)):
        fd = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            args = [x, gamma, beta]
            lo, hi = a.copy(), a.copy()
            lo[i] -= h
            hi[i] += h
            args[k] = hi
            f1 = (_bn_np(*args, 1e-2)[0] * r).sum()
            args[k] = lo
            f0 = (_bn_np(*args, 1e-2)[0] * r).sum()
            fd[i] = (f1 - f0) / (2 * h)
        np.testing.assert_allclose(g[k], fd, rtol=1e-6, atol=1e-8)


def test_moving_averages_and_inference(rng):
    c, mom, eps = 3, 0.9, 1e-3
    mm = rf.Variable(np.zeros(c), name="mm", trainable=False)
    mv = rf.Variable(np.ones(c), name="mv", trainable=False)
    px = rf.placeholder(rf.float64, (5, 2, c))
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    tr = rf.batch_norm(px, gamma, beta, mm, mv, training=True,
                       momentum=mom, epsilon=eps)
    inf = rf.batch_norm(px, gamma, beta, mm, mv, training=False,
                        momentum=mom, epsilon=eps)
    assert inf.y.op.type == "BatchNormInference"
    wm, wv = np.zeros(c), np.ones(c)
    init = rf.global_variables_initializer()
    with rf.Session() as sess:
        sess.run(init)
        for _ in range(3):
            x = rng.standard_normal((5, 2, c)) * 2 + 1
            y, _ = sess.run([tr.y, tr.update], {px: x})
            want, m, v = _bn_np(x, gamma, beta, eps)
            np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
            wm, wv = mom * wm + (1 - mom) * m, mom * wv + (1 - mom) * v
        x = rng.standard_normal((5, 2, c))
        y, m, v = sess.run([inf.y, inf.mean, inf.variance], {px: x})
    np.testing.assert_allclose(m, wm, rtol=1e-12)
    np.testing.assert_allclose(v, wv, rtol=1e-12)
    np.testing.assert_allclose(y, _bn_np(x, gamma, beta, eps, wm, wv)[0],
                               rtol=1e-12, atol=1e-12)


def test_sync_batch_norm_matches_one_device(rng):
    rows, c = [3, 1, 2, 2], 4
    x = rng.standard_normal((sum(rows), 2, c)) * 3 + 1
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    r = rng.standard_normal(x.shape)
    parts = np.split(np.arange(sum(rows)), np.cumsum(rows)[:-1])
    with rf.device("cpu:0"):
        pg = rf.constant(gamma)
        pb = rf.constant(beta)
    xs = []
    for i, n in enumerate(rows):
        with rf.device(f"cpu:{i}"):
            xs.append(rf.placeholder(rf.float64, (n, 2, c)))
    res = rf.sync_batch_norm(xs, [pg] * 4, [pb] * 4, epsilon=1e-3,
                             name="sbn")
    loss = rf.add_n([rf.reduce_sum(o.y * r[p]) for o, p in zip(res, parts)])
    grads = rf.gradients([loss], xs + [pg, pb])
    with rf.Session(cpu_devices=4) as sess:
        out = sess.run([o.y for o in res] + grads,
                       {xs[i]: x[p] for i, p in enumerate(parts)})
    want, _, _ = _bn_np(x, gamma, beta, 1e-3)
    np.testing.assert_allclose(np.concatenate(out[:4]), want, rtol=1e-12,
                               atol=1e-12)
    # d loss / d gamma of one device over the whole batch
    xhat = (want - beta) / gamma
    np.testing.assert_allclose(out[-2], (r * xhat).sum(axis=(0, 1)),
                               rtol=1e-10)
    np.testing.assert_allclose(out[-1], r.sum(axis=(0, 1)), rtol=1e-10)
    # dx sums to zero over the global batch per channel (mean removed)
    dx = np.concatenate(out[4:8])
    np.testing.assert_allclose(dx.sum(axis=(0, 1)), 0, atol=1e-10)


def test_errors():
    px = rf.placeholder(rf.float32, (2, 3))
    with pytest.raises(rf.errors.InvalidArgumentError, match="gamma"):
        rf.batch_norm(px, np.ones(4, np.float32), np.zeros(3, np.float32))
    with pytest.raises(rf.errors.InvalidArgumentError, match="rank >= 2"):
        rf.batch_norm(rf.placeholder(rf.float32, (3,)),
                      np.ones(3, np.float32), np.zeros(3, np.float32))
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="inference needs"):
        rf.batch_norm(px, np.ones(3, np.float32), np.zeros(3, np.float32),
                      training=False)
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="Device assignment required"):
        rf.sync_batch_norm([px, px], [np.ones(3, np.float32)] * 2,
                           [np.zeros(3, np.float32)] * 2)


def test_moving_average_update(rng):
    """rf_moving_average_update from Python: variable = momentum * variable
    + (1 - momentum) * value, as often as it runs; momentum outside [0, 1]
    and a non-variable are refused when built."""
    start, vals = rng.standard_normal(3), rng.standard_normal((2, 3))
    v = rf.Variable(start)
    p = rf.placeholder(rf.float64, (3,))
    up = rf.moving_average_update(v, p, 0.75, name="mau")
    assert isinstance(up, rf.Operation) and up.name == "mau"
    with rf.Session() as sess:
        sess.run(v.initializer)
        for val in vals:
            sess.run(up, {p: val})
        got = sess.run(v)
    want = start
    for val in vals:
        want = 0.75 * want + 0.25 * val
    np.testing.assert_allclose(got, want, rtol=1e-15)
    with pytest.raises(rf.errors.InvalidArgumentError, match="momentum"):
        rf.moving_average_update(v, p, 1.5)
    with pytest.raises(TypeError):
        rf.moving_average_update(p, p, 0.5)
