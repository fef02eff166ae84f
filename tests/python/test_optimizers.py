"""apply_momentum and apply_adamw from Python against NumPy in float64 over
several steps, and their errors; assign_mul (Adam's beta powers kept in a
variable) likewise."""
import numpy as np
import pytest

import ringflow as rf


@pytest.mark.parametrize("nesterov", [False, True])
def test_apply_momentum_matches_numpy(rng, nesterov):
    shape = (3, 5)
    x0 = rng.standard_normal(shape)
    var = rf.Variable(x0, name="var")
    accum = rf.Variable(np.zeros(shape), name="accum")
    grad = rf.placeholder(rf.float64, shape)
    lr = rf.placeholder(rf.float64, ())
    op = rf.apply_momentum(var, accum, lr, grad, 0.9, use_nesterov=nesterov)
    x, a = x0.copy(), np.zeros(shape)
    init = rf.global_variables_initializer()
    with rf.Session() as sess:
        sess.run(init)
        for step in range(1, 4):
            g, rate = rng.standard_normal(shape), 0.1 / step
            sess.run(op, {grad: g, lr: rate})
            a = 0.9 * a + g
            x -= rate * g + rate * 0.9 * a if nesterov else rate * a
        got_x, got_a = sess.run([var, accum])
    np.testing.assert_allclose(got_x, x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_a, a, rtol=1e-12, atol=1e-14)


def test_apply_adamw_matches_numpy(rng):
    shape = (4, 3)
    x0 = rng.standard_normal(shape)
    var = rf.Variable(x0, name="var")
    m = rf.Variable(np.zeros(shape), name="m")
    v = rf.Variable(np.zeros(shape), name="v")
    grad = rf.placeholder(rf.float64, shape)
    b1p = rf.placeholder(rf.float64, ())
    b2p = rf.placeholder(rf.float64, ())
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.1
    op = rf.apply_adamw(var, m, v, b1p, b2p, lr, b1, b2, eps, wd, grad)
    x, mm, vv = x0.copy(), np.zeros(shape), np.zeros(shape)
    init = rf.global_variables_initializer()
    with rf.Session() as sess:
        sess.run(init)
        for t in range(1, 4):
            g = rng.standard_normal(shape)
            sess.run(op, {grad: g, b1p: b1 ** t, b2p: b2 ** t})
            mm = b1 * mm + (1 - b1) * g
            vv = b2 * vv + (1 - b2) * g * g
            mh, vh = mm / (1 - b1 ** t), vv / (1 - b2 ** t)
            x = x - lr * (mh / (np.sqrt(vh) + eps) + wd * x)
        got = sess.run([var, m, v])
    for a, b in zip(got, (x, mm, vv)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_optimizer_errors():
    var = rf.Variable(np.zeros((2, 3)), name="var")
    accum = rf.Variable(np.zeros((2, 3)), name="accum")
    with pytest.raises(rf.errors.InvalidArgumentError, match="has shape"):
        rf.apply_momentum(var, accum, 0.1, np.zeros(3), 0.9)
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="must be a scalar"):
        rf.apply_adamw(var, accum, rf.Variable(np.zeros((2, 3))), 0.9, 0.9,
                       0.1, 0.9, 0.9, 1e-8, [0.1, 0.2], np.zeros((2, 3)))
    with pytest.raises(TypeError, match="not a Variable"):
        rf.apply_momentum(np.zeros((2, 3)), accum, 0.1, np.zeros((2, 3)), 0.9)
    op = rf.apply_momentum(var, var, 0.1, np.zeros((2, 3)), 0.9)
    with rf.Session() as sess:
        sess.run(var.initializer)
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="two different variables"):
            sess.run(op)


def test_assign_mul_matches_numpy(rng):
    shape = (2, 5)
    x0 = rng.standard_normal(shape)
    var = rf.Variable(x0, name="power")
    by = rf.placeholder(rf.float64, shape)
    new = rf.assign_mul(var, by)
    x = x0.copy()
    init = rf.global_variables_initializer()
    with rf.Session() as sess:
        sess.run(init)
        for _ in range(3):
            b = rng.uniform(0.5, 1.5, shape)
            x = x * b
            got = sess.run(new, {by: b})
            assert got.tobytes() == x.tobytes()
        assert sess.run(var).tobytes() == x.tobytes()


def test_assign_mul_errors():
    var = rf.Variable(np.ones(3, np.float32), name="v")
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="value has shape"):
        rf.assign_mul(var, np.ones(4, np.float32))
    ints = rf.Variable(np.ones(3, np.int32), name="n")
    with pytest.raises(rf.errors.InvalidArgumentError, match="int32"):
        rf.assign_mul(ints, np.ones(3, np.int32))
