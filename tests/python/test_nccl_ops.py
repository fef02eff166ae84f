"""The reference's test file (tf.contrib.nccl's nccl_ops_test.py), ported:
all_sum, all_prod, all_min and all_max on the device sets [1, 2, 0] and
[1, 0], reduce_sum (to a random receiver), broadcast (from a random
sender), the gradients of all_sum and reduce_sum (and broadcast's), a
broadcast on a single device, a broadcast to a device of another kind,
and all-reduce against reduce plus broadcast in one run. On virtual CPU
devices, and on GPU devices when a GPU is there. Each value is checked
against NumPy in float64, with fresh random inputs per device (the
reference fed every device the same one).

Differences from the reference, as the C library defines them: gradients
exist for float dtypes only (an integer one is an InvalidArgumentError);
graph-building errors are InvalidArgumentError, a ValueError as the
reference's; a broadcast to a device of another kind is an
UnimplementedError when the graph is compiled (the reference's is a
missing CPU kernel).
"""

import functools

import numpy as np
import pytest

import ringflow as rf
from ringflow import nccl
from conftest import need_gpu

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64]
FLOATS = [np.float16, np.float32, np.float64]
SHAPE = (3, 4)


def device_sets(kind):
    return ([f"{kind}:1", f"{kind}:2", f"{kind}:0"],
            [f"{kind}:1", f"{kind}:0"])


KINDS = [pytest.param("cpu", id="cpu"), pytest.param("gpu", id="gpu")]


def session(kind, graph, n=3):
    if kind == "gpu":
        need_gpu()
        return rf.Session(graph, gpu_devices=n, timeout=60)
    return rf.Session(graph, cpu_devices=n, timeout=60)


# ---- how each collective is applied (the reference's helpers) ----

def device_tensors(tensors, devices):
    res = []
    for t, d in zip(tensors, devices):
        with rf.device(d):
            res.append(rf.identity(t))
    return res


def all_reduce(fn, tensors, devices, rng):
    return fn(device_tensors(tensors, devices))


def reduce(fn, tensors, devices, rng):
    receiver = rng.integers(len(devices))
    with rf.device(devices[receiver]):
        return [fn(device_tensors(tensors, devices))]


def broadcast(tensors, devices, rng):
    sender = rng.integers(len(devices))
    with rf.device(devices[sender]):
        tensor = rf.identity(tensors[0])
        b = nccl.broadcast(tensor)
    return device_tensors([b] * len(devices), devices)


# ---- references ----

def inputs(rng, dtype, n, scale=1024.0):
    """n random (3, 4) arrays in [-scale/2, scale/2) of dtype (integers
    truncated)."""
    return [((rng.random(SHAPE) - 0.5) * scale).astype(dtype)
            for _ in range(n)]


def check_values(results, arrays, numpy_fn, bound_fn):
    """Each result equals numpy_fn folded over the arrays in float64, within
    len(arrays) roundings of the dtype at the magnitude bound_fn gives
    (exact for integers)."""
    wide = [a.astype(np.float64) for a in arrays]
    want = functools.reduce(numpy_fn, wide)
    dtype = np.dtype(arrays[0].dtype)
    tol = np.zeros_like(want)
    if dtype.kind == "f":
        tol += len(arrays) * float(np.finfo(dtype).eps) * bound_fn(wide)
    assert results, "no results"
    for r in results:
        assert r.shape == want.shape and r.dtype == dtype
        err = np.abs(r.astype(np.float64) - want)
        assert np.all(err <= tol), (
            f"{dtype}: got {r}, want {want}, error {err} over {tol}")


def exact(wide):
    return 0.0


def sum_bound(wide):
    return functools.reduce(np.add, [np.abs(w) for w in wide])


def prod_bound(wide):
    return np.abs(functools.reduce(np.multiply, wide))


def run_test(kind, rng, build, numpy_fn, bound_fn=exact, dtypes=DTYPES,
             sets=None, scale=None):
    """The reference's _Test: for every dtype and device set, build the
    collectives, check shape inference, run them through identities and
    compare every result with NumPy."""
    for dtype in dtypes:
        for devices in sets or device_sets(kind):
            with rf.Graph().as_default() as g:
                s = scale or (16.0 if numpy_fn is np.multiply and
                              dtype == np.float16 else 1024.0)
                arrays = inputs(rng, dtype, len(devices), s)
                reduced = build(arrays, devices, rng)
                assert reduced
                for r in reduced:
                    assert r.shape == SHAPE
                results = [rf.identity(t) for t in reduced]
                with session(kind, g) as sess:
                    check_values(sess.run(results), arrays, numpy_fn,
                                 bound_fn)


def gradient_of(build):
    """The reference's _TestGradient: the gradients of the collective's
    results weighted by the inputs placed on the results' devices, with
    respect to placeholders that are never fed (the gradients do not need
    them)."""
    def grads(arrays, devices, rng):
        xs = [rf.placeholder(a.dtype, a.shape) for a in arrays]
        reduced = build(xs, devices, rng)
        losses = device_tensors(arrays, [t.device for t in reduced])
        gs = rf.gradients(reduced, xs, losses,
                          colocate_gradients_with_ops=True)
        return [g for g in gs if g is not None]
    return grads


# ---- AllReduceTest ----

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fn,numpy_fn,bound", [
    (nccl.all_sum, np.add, sum_bound),
    (nccl.all_prod, np.multiply, prod_bound),
    (nccl.all_min, np.minimum, exact),
    (nccl.all_max, np.maximum, exact),
], ids=["sum", "prod", "min", "max"])
def test_all_reduce(kind, rng, fn, numpy_fn, bound):
    run_test(kind, rng, functools.partial(all_reduce, fn), numpy_fn, bound)


@pytest.mark.parametrize("kind", KINDS)
def test_all_sum_grad(kind, rng):
    run_test(kind, rng, gradient_of(functools.partial(all_reduce,
                                                      nccl.all_sum)),
             np.add, sum_bound, dtypes=FLOATS)


def test_all_sum_grad_integer_is_refused():
    with rf.device("cpu:0"):
        x0 = rf.placeholder(rf.int32, SHAPE)
    with rf.device("cpu:1"):
        x1 = rf.placeholder(rf.int32, SHAPE)
    sums = nccl.all_sum([x0, x1])
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="No gradient defined for AllReduce of int32"):
        rf.gradients(sums, [x0, x1])


def test_errors():
    with pytest.raises(ValueError, match="Device assignment required"):
        nccl.all_sum([rf.identity(np.random.random_sample((3, 4)))])
    with pytest.raises(ValueError, match="need n >= 1 inputs"):
        nccl.all_sum([])


# ---- SingleReduceTest ----

@pytest.mark.parametrize("kind", KINDS)
def test_reduce_sum(kind, rng):
    run_test(kind, rng, functools.partial(reduce, nccl.reduce_sum), np.add,
             sum_bound)


@pytest.mark.parametrize("kind", KINDS)
def test_reduce_sum_grad(kind, rng):
    run_test(kind, rng, gradient_of(functools.partial(reduce,
                                                      nccl.reduce_sum)),
             lambda x, y: x, exact, dtypes=FLOATS)


def test_reduce_needs_an_input_on_its_device():
    xs = []
    for d in ("cpu:1", "cpu:2"):
        with rf.device(d):
            xs.append(rf.placeholder(rf.float32, SHAPE))
    with rf.device("cpu:0"):
        with pytest.raises(ValueError, match="No input tensor uses the same "
                           "device as the Reduce op"):
            nccl.reduce_sum(xs)


# ---- BroadcastTest ----

@pytest.mark.parametrize("kind", KINDS)
def test_broadcast(kind, rng):
    run_test(kind, rng, broadcast, lambda x, y: x)


@pytest.mark.parametrize("kind", KINDS)
def test_broadcast_grad(kind, rng):
    """Broadcast's gradient: the sum of every consumer's gradient, back on
    the sender (each consumer weighted by its own input here)."""
    def build(arrays, devices, rng):
        x = rf.placeholder(arrays[0].dtype, SHAPE)
        with rf.device(devices[0]):
            b = nccl.broadcast(rf.identity(x))
        outs = device_tensors([b] * len(devices), devices)
        weights = device_tensors(arrays, devices)
        return rf.gradients(outs, [x], weights)
    run_test(kind, rng, build, np.add, sum_bound, dtypes=FLOATS)


@pytest.mark.parametrize("kind", KINDS)
def test_broadcast_single_device(kind, rng):
    """Broadcasts on a single device are removed completely during
    rewrite."""
    run_test(kind, rng, broadcast, lambda x, y: x,
             sets=([f"{kind}:0", f"{kind}:0"],))
    with rf.Graph().as_default() as g:
        with rf.device(f"{kind}:0"):
            b = nccl.broadcast(rf.identity(np.ones(SHAPE, np.float32)))
            rf.identity(b)
        if kind == "gpu":
            need_gpu()
        lowered = rf.lower(g, cpu_devices=1, gpu_devices=int(kind == "gpu"))
        assert not [op for op in lowered.get_operations()
                    if "Broadcast" in op.type]


def test_broadcast_to_gpu_error():
    """A broadcast to a device of another kind: no backend joins CPU and
    GPU devices. Compiling it fails, naming the node and both devices."""
    need_gpu()
    with rf.Graph().as_default() as g:
        with rf.device("gpu:0"):
            b = nccl.broadcast(rf.identity(np.ones(SHAPE, np.float32)),
                               name="bcast")
        with rf.device("cpu:0"):
            y = rf.identity(b)
        with rf.Session(g, cpu_devices=1, gpu_devices=1) as sess:
            with pytest.raises(rf.errors.UnimplementedError,
                               match="node 'bcast' \\(Broadcast\\) connects "
                               "gpu:0 and cpu:0") as e:
                sess.run(y)
            assert e.value.node_name == "bcast"


def test_broadcast_to_a_missing_device_error():
    """Without a GPU: a broadcast consumed on a device the session lacks is
    refused when the session is made, naming the node and device."""
    with rf.Graph().as_default() as g:
        with rf.device("cpu:0"):
            b = nccl.broadcast(rf.identity(np.ones(SHAPE, np.float32)))
        with rf.device("gpu:0"):
            rf.identity(b, name="on_gpu")
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="node 'on_gpu' \\(Identity\\) requests "
                           "device gpu:0") as e:
            rf.Session(g, cpu_devices=1)
        assert e.value.node_name == "on_gpu"


# ---- CombinedTest ----

@pytest.mark.parametrize("kind", KINDS)
def test_combined(kind, rng):
    """All-reduce vs. single-reduce plus broadcast in one session.run."""
    def combined(tensors, devices, rng):
        all_reduced = all_reduce(nccl.all_sum, tensors, devices, rng)
        single = reduce(nccl.reduce_sum, tensors, devices, rng)
        return all_reduced + broadcast(single, devices, rng)
    run_test(kind, rng, combined, np.add, sum_bound)
