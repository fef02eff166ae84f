"""Conv2D's input and filter gradients in float32 on the CPU against a
NumPy float64 reference, on random geometries (the run's seed; see
conftest.py): channels around 16, where a stride-1 input gradient starts
running as a forward convolution of the flipped filter (docs/ARCHITECTURE.md),
strides, dilations, SAME and VALID, windows wider than the input, HWIO and
OHWI filters, 1-3 pool threads, each session run twice on fresh data.
Written from session 28's outside audit (about 4,400 such cases passed)."""

import numpy as np
import pytest

import ringflow as rf

CIN = [1, 3, 8, 15, 16, 17, 24, 32, 48]
COUT = [1, 4, 8, 16, 31, 32]


def out_and_pad(n_in, k, s, d, padding):
    keff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-n_in // s)
        total = max((out - 1) * s + keff - n_in, 0)
        return out, total // 2, total - total // 2
    return max((n_in - keff) // s + 1, 0), 0, 0


def reference(x, w, g, strides, dil, padding):
    """y, dL/dx and dL/dw of L = sum(conv(x, w) * g) in float64; w HWIO."""
    n, H, W, _ = x.shape
    kh, kw, _, _ = w.shape
    oh, pt, pb = out_and_pad(H, kh, strides[0], dil[0], padding)
    ow, pl, pr = out_and_pad(W, kw, strides[1], dil[1], padding)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    y = np.zeros((n, oh, ow, w.shape[3]))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for a in range(kh):
        for b in range(kw):
            rows = slice(a * dil[0], a * dil[0] + (oh - 1) * strides[0] + 1,
                         strides[0])
            cols = slice(b * dil[1], b * dil[1] + (ow - 1) * strides[1] + 1,
                         strides[1])
            window = xp[:, rows, cols, :]
            y += np.einsum("nijc,co->nijo", window, w[a, b])
            dxp[:, rows, cols, :] += np.einsum("nijo,co->nijc", g, w[a, b])
            dw[a, b] = np.einsum("nijc,nijo->co", window, g)
    return y, dxp[:, pt:pt + H, pl:pl + W, :], dw


def random_case(rng):
    c = dict(n=int(rng.integers(1, 6)), h=int(rng.integers(1, 15)),
             cin=int(rng.choice(CIN)), cout=int(rng.choice(COUT)),
             kh=int(rng.integers(1, 6)), padding=str(rng.choice(["SAME",
                                                                  "VALID"])))
    c["w"] = c["h"] if rng.random() < 0.5 else int(rng.integers(1, 15))
    c["kw"] = c["kh"] if rng.random() < 0.5 else int(rng.integers(1, 6))
    c["strides"] = [1, 1] if rng.random() < 0.7 else [int(v) for v in
                                                       rng.integers(1, 4, 2)]
    c["dilations"] = [[1, 1], [2, 2], [1, 3]][int(rng.integers(0, 3))]
    if c["padding"] == "VALID":  # keep the dilated window inside the input
        c["kh"] = max(1, min(c["kh"], (c["h"] - 1) // c["dilations"][0] + 1))
        c["kw"] = max(1, min(c["kw"], (c["w"] - 1) // c["dilations"][1] + 1))
    c["fmt"] = str(rng.choice(["HWIO", "OHWI"]))
    c["threads"] = int(rng.integers(1, 4))
    return c


def check_case(c, rng):
    n, H, W, C, OC = c["n"], c["h"], c["w"], c["cin"], c["cout"]
    kh, kw, fmt, pad = c["kh"], c["kw"], c["fmt"], c["padding"]
    s4 = [1, *c["strides"], 1]
    d4 = [1, *c["dilations"], 1]
    oh = out_and_pad(H, kh, c["strides"][0], c["dilations"][0], pad)[0]
    ow = out_and_pad(W, kw, c["strides"][1], c["dilations"][1], pad)[0]
    wshape = (kh, kw, C, OC) if fmt == "HWIO" else (OC, kh, kw, C)
    g = rf.Graph()
    with g.as_default():
        x = rf.placeholder(rf.float32, (n, H, W, C))
        gy = rf.placeholder(rf.float32, (n, oh, ow, OC))
        w = rf.placeholder(rf.float32, wshape)
        y = rf.nn.conv2d(x, w, s4, c["padding"], dilations=d4,
                         filter_format=fmt)
        dx, dw = rf.gradients(rf.reduce_sum(y * gy), [x, w])
        dx2 = rf.nn.conv2d_backprop_input([n, H, W, C], w, gy, s4,
                                          c["padding"], dilations=d4,
                                          filter_format=fmt)
    with rf.Session(g, threads=c["threads"]) as sess:
        for _ in range(2):  # the second run: cached primitives, fresh data
            xv = rng.uniform(-1, 1, (n, H, W, C)).astype(np.float32)
            wv = rng.uniform(-1, 1, (kh, kw, C, OC)).astype(np.float32)
            gv = rng.uniform(-1, 1, (n, oh, ow, OC)).astype(np.float32)
            wfeed = wv if fmt == "HWIO" else wv.transpose(3, 0, 1, 2)
            got = sess.run([y, dx, dw, dx2],
                           {x: xv, w: np.ascontiguousarray(wfeed), gy: gv})
            want = reference(xv.astype(np.float64), wv.astype(np.float64),
                             gv.astype(np.float64), c["strides"],
                             c["dilations"], c["padding"])
            got_dw = got[2] if fmt == "HWIO" else got[2].transpose(1, 2, 3, 0)
            # float32 sums of `terms` products of values in [-1, 1]
            terms = [kh * kw * C, kh * kw * OC, n * oh * ow, kh * kw * OC]
            for name, a, b, t in zip(["y", "dx", "dw", "backprop_input"],
                                     [got[0], got[1], got_dw, got[3]],
                                     [want[0], want[1], want[2], want[1]],
                                     terms):
                assert a.shape == b.shape, (name, c)
                np.testing.assert_allclose(a, b, rtol=0, atol=max(1e-4,
                                                                  2e-6 * t),
                                           err_msg=f"{name} of {c}")


# Around the 16-channel floor of the flipped-filter input gradient, with
# even windows (padding after > before), windows wider than the input,
# dilations and a stride beside them.
EDGES = [
    dict(h=6, w=7, cin=16, cout=16, kh=2, kw=2, padding="SAME"),
    dict(h=6, w=7, cin=17, cout=31, kh=4, kw=2, padding="SAME"),
    dict(h=3, w=2, cin=32, cout=8, kh=5, kw=5, padding="SAME"),
    dict(h=9, w=9, cin=16, cout=4, kh=2, kw=4, padding="SAME",
         dilations=[1, 3]),
    dict(h=7, w=7, cin=16, cout=32, kh=7, kw=7, padding="VALID"),
    dict(h=7, w=7, cin=24, cout=8, kh=3, kw=3, padding="VALID",
         dilations=[2, 2]),
    dict(h=10, w=10, cin=15, cout=8, kh=3, kw=3, padding="SAME"),
    dict(h=14, w=14, cin=32, cout=16, kh=5, kw=5, padding="SAME"),
    dict(h=9, w=8, cin=16, cout=8, kh=3, kw=3, padding="SAME",
         strides=[2, 2]),
]


@pytest.mark.parametrize("i", range(len(EDGES)))
@pytest.mark.parametrize("fmt", ["HWIO", "OHWI"])
def test_conv_gradients_edges(i, fmt, rng):
    c = dict(n=3, strides=[1, 1], dilations=[1, 1], threads=1 + i % 3,
             fmt=fmt)
    c.update(EDGES[i])
    check_case(c, rng)


def test_conv_gradients_random(rng):
    for _ in range(30):
        check_case(random_case(rng), rng)
