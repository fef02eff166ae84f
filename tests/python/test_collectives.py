"""ringflow.collectives: all_reduce with every reduction, reduce,
broadcast, all_gather and reduce_scatter over the C ops, on 1..4 CPU
devices, against NumPy in float64; their gradients; argument errors."""

import numpy as np
import pytest

import ringflow as rf
from ringflow import collectives

REFERENCE = {
    "sum": lambda a: a.sum(0),
    "prod": lambda a: a.prod(0),
    "min": lambda a: a.min(0),
    "max": lambda a: a.max(0),
}


def placeholders(n, dtype, shape):
    xs = []
    for d in range(n):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(dtype, shape))
    return xs


def avg_reference(a, dtype):
    if np.dtype(dtype).kind == "f":
        return a.mean(0)
    return np.trunc(a.sum(0) / len(a))  # integers truncate toward zero


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
@pytest.mark.parametrize("reduction", ["sum", "prod", "min", "max", "avg"])
def test_all_reduce(n, dtype, reduction, rng):
    xs = placeholders(n, dtype, (5,))
    values = [(rng.standard_normal(5) * 8).astype(dtype) for _ in range(n)]
    outs = collectives.all_reduce(xs, reduction)
    assert [o.device for o in outs] == [f"cpu:{d}" for d in range(n)]
    wide = np.array(values, np.float64)
    want = (avg_reference(wide, dtype) if reduction == "avg"
            else REFERENCE[reduction](wide))
    with rf.Session(cpu_devices=n) as sess:
        got = sess.run(outs, dict(zip(xs, values)))
    tol = 0 if np.dtype(dtype).kind == "i" else 1e-5 * np.abs(want).max()
    for g in got:
        np.testing.assert_array_equal(g, got[0])  # bit-identical
        np.testing.assert_allclose(g, want, atol=tol, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["sum", "prod", "min", "max"])
def test_reduce_and_broadcast(reduction, rng):
    xs = placeholders(3, rf.float64, (2, 2))
    values = [rng.standard_normal((2, 2)) for _ in xs]
    with rf.device("cpu:2"):
        r = collectives.reduce(xs, reduction)
    assert r.device == "cpu:2"
    b = collectives.broadcast(r)
    outs = []
    for d in range(3):
        with rf.device(f"cpu:{d}"):
            outs.append(rf.identity(b))
    with rf.Session(cpu_devices=3) as sess:
        got = sess.run([r] + outs, dict(zip(xs, values)))
    want = REFERENCE[reduction](np.array(values))
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n", [1, 3])
def test_all_gather_and_reduce_scatter(n, rng):
    xs = placeholders(n, rf.float64, (2, 3))
    values = [rng.standard_normal((2, 3)) for _ in xs]
    gathered = collectives.all_gather(xs)
    ys = placeholders(n, rf.float64, (2 * n, 3))
    big = [rng.standard_normal((2 * n, 3)) for _ in ys]
    scattered = collectives.reduce_scatter(ys, "sum")
    feeds = dict(zip(xs, values))
    feeds.update(zip(ys, big))
    with rf.Session(cpu_devices=n) as sess:
        got_g, got_s = sess.run([gathered, scattered], feeds)
    for g in got_g:
        np.testing.assert_array_equal(g, np.concatenate(values))
    total = np.sum(big, 0)
    for i, s in enumerate(got_s):
        np.testing.assert_allclose(s, total[2 * i:2 * i + 2], rtol=1e-12,
                                   atol=1e-14)


def test_gradients_through_collectives(rng):
    """all_gather's gradient is the reduce-scatter of the weights, avg's
    the average of them, max's goes to the participant holding the max."""
    n = 3
    xs = placeholders(n, rf.float64, (2,))
    values = [rng.standard_normal(2) for _ in xs]
    weights = [rng.standard_normal(2 * n) for _ in xs]
    gathered = collectives.all_gather(xs)
    d_gather = rf.gradients(gathered, xs, weights)
    wsmall = [w[:2] for w in weights]
    d_avg = rf.gradients(collectives.all_reduce(xs, "avg"), xs, wsmall)
    d_max = rf.gradients(collectives.all_reduce(xs, "max"), xs, wsmall)
    with rf.Session(cpu_devices=n) as sess:
        got_gather, got_avg, got_max = sess.run(
            [d_gather, d_avg, d_max], dict(zip(xs, values)))
    total = np.sum(weights, 0)
    wsum = np.sum(wsmall, 0)
    winner = np.argmax(np.array(values), 0)
    for i in range(n):
        np.testing.assert_allclose(got_gather[i], total[2 * i:2 * i + 2])
        np.testing.assert_allclose(got_avg[i], wsum / n)
        np.testing.assert_allclose(got_max[i], np.where(winner == i, wsum,
                                                        0.0))


def test_argument_errors():
    xs = placeholders(2, rf.float32, (2,))
    with pytest.raises(ValueError, match="unknown reduction 'mean'"):
        collectives.all_reduce(xs, "mean")
    with rf.device("cpu:1"):
        other = rf.placeholder(rf.float64, (2,), name="wide")
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="inputs disagree on dtype") as e:
        collectives.all_reduce([xs[0], other], name="mixed")
    assert "cpu:1" in e.value.message
    with pytest.raises(rf.errors.InvalidArgumentError, match="not valid"):
        collectives.all_reduce(xs, name="a#b")
    # Nothing half-built stays behind: the graph still builds and runs.
    outs = collectives.all_reduce(xs, "sum", name="fine")
    with rf.Session(cpu_devices=2) as sess:
        got = sess.run(outs, {xs[0]: [1, 2], xs[1]: [3, 4]})
    np.testing.assert_array_equal(got[1], [4, 6])


@pytest.mark.parametrize("wire", ["bfloat16", rf.float16])
def test_all_reduce_comm_dtype(wire, rng):
    """all_reduce(..., comm_dtype=) is rf_all_reduce_set_comm_dtype on
    every participant: a narrowing wire dtype rounds a float32 input to it
    (1 + 2**-12 is 1 in bfloat16 and float16) whatever the session says;
    "float32" keeps full precision under a session's narrowing
    comm_dtype."""
    g = rf.Graph()
    with g.as_default():
        xs = []
        for d in range(2):
            with rf.device(f"cpu:{d}"):
                xs.append(rf.placeholder(rf.float32, (3,)))
        narrow = collectives.all_reduce(xs, comm_dtype=wire)
        full = collectives.all_reduce(xs, comm_dtype="float32")
        plain = collectives.all_reduce(xs)
    assert [t.op.get_attr("comm_dtype") for t in narrow] == \
        [rf.as_dtype(wire).name] * 2
    a = np.array([1 + 2.0**-12, 2, -3], np.float32)
    b = np.zeros(3, np.float32)
    for session_wire, plain_exact in ((None, True), ("bfloat16", False)):
        with rf.Session(g, cpu_devices=2, comm_dtype=session_wire) as s:
            n, f, p = s.run([narrow, full, plain], {xs[0]: a, xs[1]: b})
        for d in range(2):
            np.testing.assert_array_equal(n[d], [1, 2, -3])
            np.testing.assert_array_equal(f[d], a)
            np.testing.assert_array_equal(p[d], a if plain_exact
                                          else [1, 2, -3])


def test_all_reduce_comm_dtype_refused():
    g = rf.Graph()
    with g.as_default():
        xs = []
        for d in range(2):
            with rf.device(f"cpu:{d}"):
                xs.append(rf.placeholder(rf.int32, (3,)))
        n = len(g.get_operations())
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="only float32 all-reduces take it"):
            collectives.all_reduce(xs, name="grads", comm_dtype="bfloat16")
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="float32, bfloat16 or float16"):
            collectives.all_reduce(xs, name="grads", comm_dtype="int8")
        # refused: nothing added, so the name is still free
        assert len(g.get_operations()) == n
        ys = collectives.all_reduce(xs, name="grads", comm_dtype="float32")
        assert [y.op.name for y in ys] == ["grads_0", "grads_1"]
