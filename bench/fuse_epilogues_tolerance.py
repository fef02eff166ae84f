"""bench/fuse_epilogues_tolerance.py - how far honest rounding moves the
fetches of tests/test_gpu_fuse_epilogues.c's MLP (issue 19), in NumPy: per
element against 1 + |want| (the test's old check) and against 1 + the
fetch's largest |want| (its check now).

  float32, dyadic data: float32 runs that sum in different orders (split-K
  1/4/16) against the exact float64 run;
  float16/bfloat16: the fused path (product + bias rounded once) against
  the unfused one (product rounded, then bias), float32 accumulation.

  .venv/bin/python bench/fuse_epilogues_tolerance.py   (NumPy, ml_dtypes)
"""
import ml_dtypes
import numpy as np

rng = np.random.default_rng(1)


def dyadic(shape):
    return np.floor(rng.uniform(-1, 1, shape) * 8 + 0.5) / 8


def errors(got, want):
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    w = np.abs(want.astype(np.float64))
    return np.max(d / (1 + w)), np.max(d) / (1 + np.max(w))


def f32_model(x, w1, b1, w2, b2, dt, splitk):
    def mm(a, b):
        a, b = a.astype(dt), b.astype(dt)
        parts = np.array_split(np.arange(a.shape[1]), splitk)
        acc = np.zeros((a.shape[0], b.shape[1]), dt)
        for p in parts:
            acc = (acc + (a[:, p] @ b[p, :]).astype(dt)).astype(dt)
        return acc
    pre = (mm(x, w1) + b1).astype(dt)
    h = np.maximum(pre, 0)
    z = (mm(h, w2) + b2).astype(dt)
    dz = (2 * z).astype(dt)
    dpre = (mm(dz, w2.T) * (pre > 0)).astype(dt)
    return dict(z=z, dx=mm(dpre, w1.T), dW1=mm(x.T, dpre),
                db1=dpre.sum(0).astype(dt), dW2=mm(h.T, dz),
                db2=dz.sum(0).astype(dt))


for B, I, H, O in [(256, 512, 64, 16), (128, 96, 48, 32)]:
    x, w1, b1 = dyadic((B, I)), dyadic((I, H)), dyadic(H)
    w2, b2 = dyadic((H, O)), dyadic(O)
    exact = f32_model(x, w1, b1, w2, b2, np.float64, 1)
    for sk in (1, 4, 16):
        got = f32_model(x, w1, b1, w2, b2, np.float32, sk)
        for k in got:
            e, s = errors(got[k], exact[k])
            print(f"float32 B{B} I{I} H{H} O{O} split-K {sk:2d} {k:4s} "
                  f"per-element {e:.1e}  of-largest {s:.1e}")


def half_model(x, w1, b1, w2, b2, dt, fused):
    f = lambda a: a.astype(np.float32)
    def lin(a, w, b):
        acc = f(a) @ f(w)
        if not fused:
            acc = f(acc.astype(dt))
        return (acc + f(b)).astype(dt)
    h = np.maximum(lin(x, w1, b1), 0)
    z = lin(h, w2, b2)
    dz = (2 * f(z)).astype(dt)
    return dict(h=h, z=z, dW2=(f(h).T @ f(dz)).astype(dt),
                db2=f(dz).sum(0).astype(dt))


for dt in (np.float16, ml_dtypes.bfloat16):
    for B, I, H, O in [(256, 192, 64, 16), (64, 32, 32, 16)]:
        r = lambda s: rng.uniform(-.5, .5, s).astype(dt)
        args = r((B, I)), r((I, H)), r(H), r((H, O)), r(O)
        a, b = half_model(*args, dt, True), half_model(*args, dt, False)
        for k in a:
            e, s = errors(a[k], b[k])
            print(f"{np.dtype(dt).name} B{B} I{I} H{H} O{O} fused-unfused "
                  f"{k:4s} per-element {e:.1e}  of-largest {s:.1e}")
