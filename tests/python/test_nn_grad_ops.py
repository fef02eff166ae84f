"""The gradient ops of the README's op list called directly from Python
(issue 17 item 8: every op reachable from Python): rf.nn.
conv2d_backprop_input, conv2d_backprop_filter, max_pool_grad and
avg_pool_grad against NumPy in float64, and their errors."""

import numpy as np
import pytest

import ringflow as rf


def run(fetches, feeds=None):
    with rf.Session(rf.get_default_graph()) as sess:
        return sess.run(fetches, feeds)


def geometry(n, k, s, padding):
    if padding == "SAME":
        o = -(-n // s)
        return o, max((o - 1) * s + k - n, 0) // 2
    return (n - k) // s + 1, 0


def windows(h, w, k, s, padding):
    """(a, b, [(ih, iw), ...]) for every output position: the input
    positions of its window inside the input."""
    oh, pt = geometry(h, k[0], s[0], padding)
    ow, pl = geometry(w, k[1], s[1], padding)
    for a in range(oh):
        for b in range(ow):
            cells = [(a * s[0] - pt + i, b * s[1] - pl + j)
                     for i in range(k[0]) for j in range(k[1])]
            yield a, b, [(i, j) for i, j in cells
                         if 0 <= i < h and 0 <= j < w]


def conv_grads_ref(x, f, dy, s, padding):
    """d(sum(conv(x, f) * dy)) / dx and / df."""
    kh, kw = f.shape[:2]
    dx, df = np.zeros(x.shape), np.zeros(f.shape)
    oh, pt = geometry(x.shape[1], kh, s[0], padding)
    ow, pl = geometry(x.shape[2], kw, s[1], padding)
    for a in range(oh):
        for b in range(ow):
            for i in range(kh):
                for j in range(kw):
                    ih, iw = a * s[0] - pt + i, b * s[1] - pl + j
                    if 0 <= ih < x.shape[1] and 0 <= iw < x.shape[2]:
                        dx[:, ih, iw, :] += dy[:, a, b, :] @ f[i, j].T
                        df[i, j] += x[:, ih, iw, :].T @ dy[:, a, b, :]
    return dx, df


def pool_grads_ref(x, dy, k, s, padding):
    """MaxPool's (to each window's first maximum) and AvgPool's dx."""
    dmax, davg = np.zeros(x.shape), np.zeros(x.shape)
    n, h, w, c = x.shape
    for a, b, cells in windows(h, w, k, s, padding):
        for bi in range(n):
            for ch in range(c):
                vals = [x[bi, i, j, ch] for i, j in cells]
                i, j = cells[int(np.argmax(vals))]
                dmax[bi, i, j, ch] += dy[bi, a, b, ch]
                for i, j in cells:
                    davg[bi, i, j, ch] += dy[bi, a, b, ch] / len(cells)
    return dmax, davg


CASES = [((2, 5, 6, 3), (2, 2), (2, 2), "VALID"),
         ((1, 5, 7, 2), (3, 2), (2, 1), "SAME"),
         ((2, 4, 4, 1), (2, 3), (3, 4), "SAME")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xshape,k,s,padding", CASES)
def test_conv2d_backprop_ops(rng, dtype, xshape, k, s, padding):
    oc = 4
    x = rng.standard_normal(xshape).astype(dtype)
    f = rng.standard_normal(k + (xshape[3], oc)).astype(dtype)
    oh, _ = geometry(xshape[1], k[0], s[0], padding)
    ow, _ = geometry(xshape[2], k[1], s[1], padding)
    dy = rng.standard_normal((xshape[0], oh, ow, oc)).astype(dtype)
    dxi = rf.nn.conv2d_backprop_input(list(xshape), f, dy, s, padding,
                                      name="dx")
    sizes = rf.shape(rf.constant(f))
    dfi = rf.nn.conv2d_backprop_filter(x, sizes, dy, list(s), padding)
    assert dxi.op.type == "Conv2DBackpropInput" and dxi.op.name == "dx"
    assert dfi.op.type == "Conv2DBackpropFilter"
    dfl = rf.nn.conv2d_backprop_filter(x, list(f.shape), dy, s, padding)
    assert dxi.shape == xshape and dfl.shape == f.shape
    got_dx, got_df, got_dfl = run([dxi, dfi, dfl])
    np.testing.assert_array_equal(got_df, got_dfl)
    want_dx, want_df = conv_grads_ref(x.astype(np.float64),
                                      f.astype(np.float64),
                                      dy.astype(np.float64), s, padding)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got_dx, want_dx, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_df, want_df, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xshape,k,s,padding", CASES)
def test_pool_grad_ops(rng, dtype, xshape, k, s, padding):
    x = rng.standard_normal(xshape).astype(dtype)
    xt = rf.constant(x)
    y = rf.nn.max_pool2d(xt, k, s, padding)
    dy = rng.standard_normal(y.shape).astype(dtype)
    mg = rf.nn.max_pool_grad(xt, y, dy, k, s, padding, name="mg")
    ag = rf.nn.avg_pool_grad(list(xshape), dy, list(k), s, padding)
    assert (mg.op.type, ag.op.type) == ("MaxPoolGrad", "AvgPoolGrad")
    assert mg.op.name == "mg" and mg.shape == ag.shape == xshape
    got_max, got_avg = run([mg, ag])
    want_max, want_avg = pool_grads_ref(x.astype(np.float64),
                                        dy.astype(np.float64), k, s,
                                        padding)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got_max, want_max, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_avg, want_avg, rtol=tol, atol=tol)


def test_grad_op_errors():
    f = rf.constant(np.ones((2, 2, 3, 4), np.float32))
    dy = rf.constant(np.ones((1, 2, 2, 4), np.float64))
    with pytest.raises(rf.errors.InvalidArgumentError, match="'bi'"):
        rf.nn.conv2d_backprop_input([1, 3, 3, 3], f, dy, 1, "VALID",
                                    name="bi")
    x = rf.constant(np.ones((1, 4, 4, 1), np.float32))
    y = rf.nn.max_pool2d(x, 2, 2, "VALID")
    with pytest.raises(rf.errors.InvalidArgumentError, match="padding"):
        rf.nn.max_pool_grad(x, y, y, 2, 2, "FULL")
    with pytest.raises(ValueError, match="data_format"):
        rf.nn.avg_pool_grad([1, 4, 4, 1], y, 2, 2, "VALID",
                            data_format="NCHW")
    with pytest.raises(ValueError, match="ksize"):
        rf.nn.max_pool_grad(x, y, y, [1, 2, 2], 2, "VALID")


def test_gradient_of_op_without_one_is_not_found():
    # docs/PYTHON.md, rf.gradients: an op with no gradient function at all is
    # NotFoundError naming it; a gradient refused for a dtype is
    # InvalidArgumentError (test_collectives covers that one).
    x = rf.constant(np.ones((1, 4, 4, 1), np.float32))
    y = rf.nn.max_pool2d(x, 2, 2, "VALID")
    g = rf.nn.max_pool_grad(x, y, y, 2, 2, "VALID", name="mpg")
    want = "No gradient defined for op 'MaxPoolGrad'.*'mpg'"
    with pytest.raises(rf.errors.NotFoundError, match=want):
        rf.gradients(g, x)
