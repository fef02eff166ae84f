"""tf.nn.conv2d, max_pool2d, avg_pool2d and bias_add against NumPy in
float64: outputs, gradients (rf.gradients against NumPy's own gradient
formulas) and the errors the C library raises."""

import numpy as np
import pytest

import ringflow as rf


def run(fetches, feeds=None):
    with rf.Session(rf.get_default_graph()) as sess:
        return sess.run(fetches, feeds)


def out_size(n, k, s, d, padding):
    eff = (k - 1) * d + 1
    if padding == "SAME":
        o = -(-n // s)
        return o, max((o - 1) * s + eff - n, 0) // 2
    return (n - eff) // s + 1, 0


def conv_ref(x, f, strides, padding, dil):
    n, h, w, c = x.shape
    kh, kw, _, oc = f.shape
    oh, pt = out_size(h, kh, strides[0], dil[0], padding)
    ow, pl = out_size(w, kw, strides[1], dil[1], padding)
    y = np.zeros((n, oh, ow, oc))
    for i in range(kh):
        for j in range(kw):
            for a in range(oh):
                for b in range(ow):
                    ih = a * strides[0] - pt + i * dil[0]
                    iw = b * strides[1] - pl + j * dil[1]
                    if 0 <= ih < h and 0 <= iw < w:
                        y[:, a, b, :] += x[:, ih, iw, :] @ f[i, j]
    return y


def pool_ref(x, k, s, padding, op):
    n, h, w, c = x.shape
    oh, pt = out_size(h, k[0], s[0], 1, padding)
    ow, pl = out_size(w, k[1], s[1], 1, padding)
    y = np.zeros((n, oh, ow, c))
    for a in range(oh):
        for b in range(ow):
            h0, w0 = max(a * s[0] - pt, 0), max(b * s[1] - pl, 0)
            h1 = min(a * s[0] - pt + k[0], h)
            w1 = min(b * s[1] - pl + k[1], w)
            y[:, a, b, :] = op(x[:, h0:h1, w0:w1, :], axis=(1, 2))
    return y


CONV_CASES = [  # x shape, filter (kh, kw, oc), strides, padding, dilations
    ((2, 5, 6, 3), (3, 3, 4), (1, 1), "SAME", (1, 1)),
    ((2, 7, 6, 2), (3, 2, 3), (2, 1), "VALID", (1, 1)),
    ((1, 7, 8, 2), (2, 2, 2), (3, 3), "SAME", (1, 1)),
    ((1, 7, 6, 2), (3, 3, 2), (1, 1), "SAME", (2, 2)),
    ((1, 2, 3, 2), (5, 5, 2), (1, 1), "SAME", (1, 1)),
    ((0, 4, 4, 2), (3, 3, 2), (1, 1), "SAME", (1, 1)),
]


@pytest.mark.parametrize("xs, fs, strides, padding, dil", CONV_CASES)
def test_conv2d_against_numpy(xs, fs, strides, padding, dil):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, xs)
    f = rng.uniform(-1, 1, (fs[0], fs[1], xs[3], fs[2]))
    rf.reset_default_graph()
    xp = rf.placeholder(rf.float64, xs)
    fc = rf.constant(f)
    y = rf.nn.conv2d(xp, fc, strides=list(strides), padding=padding,
                     dilations=list(dil))
    want = conv_ref(x, f, strides, padding, dil)
    assert tuple(y.shape) == want.shape
    r = rng.uniform(-1, 1, want.shape)
    dx, df = rf.gradients(rf.reduce_sum(y * r), [xp, fc])
    got, gx, gf = run([y, dx, df], {xp: x})
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the gradients of sum(conv(x, f) * r) are linear maps: check them by
    # the adjoint identity <d/dx, e> = sum(conv(e, f) * r)
    e = rng.uniform(-1, 1, x.shape)
    np.testing.assert_allclose(np.sum(gx * e),
                               np.sum(conv_ref(e, f, strides, padding, dil)
                                      * r), rtol=1e-10, atol=1e-10)
    e = rng.uniform(-1, 1, f.shape)
    np.testing.assert_allclose(np.sum(gf * e),
                               np.sum(conv_ref(x, e, strides, padding, dil)
                                      * r), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("k, s, padding", [((3, 3), (2, 2), "SAME"),
                                           ((2, 2), (2, 2), "VALID"),
                                           ((2, 2), (3, 3), "SAME"),
                                           ((5, 4), (1, 1), "SAME")])
def test_pools_against_numpy(k, s, padding):
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (2, 5, 4, 3))
    rf.reset_default_graph()
    xp = rf.placeholder(rf.float64, x.shape)
    mx = rf.nn.max_pool2d(xp, ksize=list(k), strides=list(s),
                          padding=padding)
    av = rf.nn.avg_pool2d(xp, ksize=list(k), strides=list(s),
                          padding=padding)
    r = rng.uniform(-1, 1, tuple(mx.shape))
    dmax, = rf.gradients(rf.reduce_sum(mx * r), [xp])
    davg, = rf.gradients(rf.reduce_sum(av * r), [xp])
    gm, ga, gdm, gda = run([mx, av, dmax, davg], {xp: x})
    np.testing.assert_allclose(gm, pool_ref(x, k, s, padding, np.max))
    np.testing.assert_allclose(ga, pool_ref(x, k, s, padding, np.mean),
                               rtol=1e-14, atol=1e-15)
    # AvgPool is linear: <davg, e> = sum(avg(e) * r); MaxPool's gradient
    # puts each r at its window's maximum, so <dmax, x> = sum(max(x) * r)
    e = rng.uniform(-1, 1, x.shape)
    np.testing.assert_allclose(
        np.sum(gda * e), np.sum(pool_ref(e, k, s, padding, np.mean) * r),
        rtol=1e-12)
    np.testing.assert_allclose(np.sum(gdm * x), np.sum(gm * r), rtol=1e-12)


def test_bias_add_nhwc():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (2, 3, 4, 5))
    b = rng.uniform(-1, 1, 5)
    rf.reset_default_graph()
    y = rf.nn.bias_add(rf.constant(x), b, data_format="NHWC")
    np.testing.assert_allclose(run(y), x + b)
    with pytest.raises(ValueError, match="NHWC"):
        rf.nn.bias_add(rf.constant(x), b, data_format="NCHW")


def test_errors():
    rf.reset_default_graph()
    x = rf.placeholder(rf.float32, (1, 8, 8, 3))
    f = rf.constant(np.zeros((3, 3, 2, 4), np.float32))
    with pytest.raises(rf.errors.InvalidArgumentError, match="in_channels"):
        rf.nn.conv2d(x, f, strides=1, padding="SAME", name="bad")
    g = rf.constant(np.zeros((3, 3, 3, 4), np.float32))
    with pytest.raises(rf.errors.InvalidArgumentError, match="strides"):
        rf.nn.conv2d(x, g, strides=0, padding="SAME")
    with pytest.raises(rf.errors.InvalidArgumentError, match="padding"):
        rf.nn.conv2d(x, g, strides=1, padding="FULL")
    with pytest.raises(ValueError, match="NHWC"):
        rf.nn.conv2d(x, g, strides=1, padding="SAME", data_format="NCHW")
    with pytest.raises(ValueError, match="entries"):
        rf.nn.max_pool2d(x, ksize=[2, 2, 2], strides=1, padding="SAME")


@pytest.mark.parametrize("xs, fs, strides, padding, dil", CONV_CASES)
def test_conv2d_ohwi_against_numpy(xs, fs, strides, padding, dil):
    """filter_format="OHWI": filters (out, kh, kw, in); the output, both
    gradients (rf.gradients keeps the format: df comes back OHWI) and the
    backprop ops against the HWIO reference on the permuted filter."""
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, xs)
    f = rng.uniform(-1, 1, (fs[2], fs[0], fs[1], xs[3]))  # OHWI
    f_hwio = f.transpose(1, 2, 3, 0)
    rf.reset_default_graph()
    xp = rf.placeholder(rf.float64, xs)
    fc = rf.constant(f)
    y = rf.nn.conv2d(xp, fc, strides=list(strides), padding=padding,
                     dilations=list(dil), filter_format="OHWI")
    want = conv_ref(x, f_hwio, strides, padding, dil)
    assert tuple(y.shape) == want.shape
    r = rng.uniform(-1, 1, want.shape)
    dx, df = rf.gradients(rf.reduce_sum(y * r), [xp, fc])
    assert tuple(df.shape) == f.shape
    bpi = rf.nn.conv2d_backprop_input(list(xs), fc, r, strides=list(strides),
                                      padding=padding, dilations=list(dil),
                                      filter_format="OHWI")
    bpf = rf.nn.conv2d_backprop_filter(xp, list(f.shape), r,
                                       strides=list(strides), padding=padding,
                                       dilations=list(dil),
                                       filter_format="OHWI")
    got, gx, gf, gi, gff = run([y, dx, df, bpi, bpf], {xp: x})
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gi, gx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gff, gf, rtol=1e-12, atol=1e-12)
    e = rng.uniform(-1, 1, x.shape)
    np.testing.assert_allclose(np.sum(gx * e),
                               np.sum(conv_ref(e, f_hwio, strides, padding,
                                               dil) * r),
                               rtol=1e-10, atol=1e-10)
    e = rng.uniform(-1, 1, f.shape)  # OHWI, as gf
    np.testing.assert_allclose(np.sum(gf * e),
                               np.sum(conv_ref(x, e.transpose(1, 2, 3, 0),
                                               strides, padding, dil) * r),
                               rtol=1e-10, atol=1e-10)


def test_filter_format_errors():
    rf.reset_default_graph()
    x = rf.placeholder(rf.float32, (1, 8, 8, 3))
    f = rf.constant(np.zeros((4, 3, 3, 2), np.float32))  # OHWI, in 2 != 3
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match=r"in_channels \(dim 3\)"):
        rf.nn.conv2d(x, f, strides=1, padding="SAME", filter_format="OHWI")
    with pytest.raises(ValueError, match="HWIO' or 'OHWI"):
        rf.nn.conv2d(x, f, strides=1, padding="SAME", filter_format="OIHW")
