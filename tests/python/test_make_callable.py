"""Session.make_callable (a run prepared once, as TensorFlow's) and the
prepared runs behind Session.run: the same values as a reference, the same
no-copy feeds and fetches, errors as exceptions, several threads at once,
and run()'s cache of them never serving a changed request."""

import gc
import threading
import weakref

import numpy as np
import pytest

import ringflow as rf
from ringflow import errors


def address(arr):
    return arr.__array_interface__["data"][0]


def mlp_step(n):
    """n devices: y_d = relu(x_d @ w_d), summed across devices."""
    xs, ws, ys = [], [], []
    for d in range(n):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(rf.float64, (4, 3)))
            ws.append(rf.placeholder(rf.float64, (3, 2)))
            ys.append(rf.relu(xs[-1] @ ws[-1]))
    return xs, ws, rf.nccl.all_sum(ys)


def reference(xv, wv):
    return sum(np.maximum(x @ w, 0.0) for x, w in zip(xv, wv))


def test_callable_runs_the_step(rng):
    n = 3
    xs, ws, sums = mlp_step(n)
    with rf.Session(cpu_devices=n) as sess:
        f = sess.make_callable(sums, feed_list=xs + ws)
        for _ in range(3):  # fresh values each call
            xv = [rng.standard_normal((4, 3)) for _ in xs]
            wv = [rng.standard_normal((3, 2)) for _ in ws]
            got = f(*xv, *wv)
            assert isinstance(got, list) and len(got) == n
            for g in got:
                np.testing.assert_allclose(g, reference(xv, wv),
                                           rtol=1e-12, atol=1e-12)
            again = sess.run(sums, dict(zip(xs + ws, xv + wv)))
            for g, a in zip(got, again):
                np.testing.assert_array_equal(g, a)


def test_callable_fetch_structures():
    """A tensor gives an array, an Operation None, a nested structure the
    same structure; no feed_list: no arguments."""
    x = rf.constant(np.arange(6.0).reshape(2, 3))
    y = rf.reduce_sum(x)
    op = rf.no_op()
    with rf.Session() as sess:
        assert sess.make_callable(y)() == 15.0
        assert sess.make_callable(op)() is None
        got = sess.make_callable({"a": (x, [y, op])})()
        assert list(got) == ["a"] and isinstance(got["a"], tuple)
        np.testing.assert_array_equal(got["a"][0], np.arange(6.0)
                                      .reshape(2, 3))
        assert got["a"][1][0] == 15.0 and got["a"][1][1] is None
        assert sess.make_callable((y,))()[0] == 15.0


def test_callable_feeds_and_fetches_without_a_copy():
    x = rf.placeholder(rf.float32, (256, 4))
    with rf.device("cpu:1"):
        y = rf.identity(x)
    value = np.random.default_rng(1).standard_normal((256, 4)).astype(
        np.float32)
    with rf.Session(cpu_devices=2) as sess:
        f = sess.make_callable([x, y], feed_list=[x])
        got_x, got_y = f(value)
    assert address(got_x) == address(got_y) == address(value)
    assert not got_y.flags.writeable


def test_callable_converts_other_values(rng):
    """Another dtype, a strided view, a list: converted, right values; the
    fed array is released once the step is done."""
    x = rf.placeholder(rf.float32, (3,))
    y = x * 2.0
    with rf.Session() as sess:
        f = sess.make_callable(y, [x])
        np.testing.assert_array_equal(f([1, 2, 3]), [2, 4, 6])
        np.testing.assert_array_equal(f(np.arange(6.0)[::2]), [0, 4, 8])
        value = rng.standard_normal(3).astype(np.float32)
        alive = weakref.ref(value)
        got = f(value)
        np.testing.assert_array_equal(got, value * 2)
        del value
        gc.collect()
        assert alive() is None


def test_callable_errors():
    x = rf.placeholder(rf.float32, (2, 2))
    y = rf.identity(x)
    sess = rf.Session()
    f = sess.make_callable(y, feed_list=[x])
    with pytest.raises(TypeError, match="takes 1 feed values"):
        f()
    with pytest.raises(errors.InvalidArgumentError) as e:
        f(np.zeros((3, 2), np.float32))
    assert e.value.node_name == x.op.name and "shape" in e.value.message
    with pytest.raises(ValueError):
        f("not a number")
    with pytest.raises(TypeError, match="feed_dict keys must be Tensors"):
        sess.make_callable(y, feed_list=["x"])
    with pytest.raises(TypeError, match="cannot fetch"):
        sess.make_callable("y")
    # Still usable after its errors.
    np.testing.assert_array_equal(f(np.ones((2, 2), np.float32)),
                                  np.ones((2, 2)))
    sess.close()
    with pytest.raises(RuntimeError, match="closed"):
        f(np.ones((2, 2), np.float32))


def test_callable_keeps_its_session():
    """A callable of a session nobody else holds still runs; closing the
    session ends it."""
    x = rf.placeholder(rf.float64, (2,))
    y = x * 3.0
    f = rf.Session().make_callable(y, [x])
    gc.collect()
    np.testing.assert_array_equal(f(np.array([1.0, 2.0])), [3, 6])


def test_callable_of_a_node_added_after_the_session():
    x = rf.placeholder(rf.float32, ())
    with rf.Session() as sess:
        late = x + 1.0
        f = sess.make_callable(late, [x])
        with pytest.raises(errors.NotFoundError, match="copy of its graph"):
            f(np.float32(1))


def test_callable_from_several_threads(rng):
    threads, steps = 6, 30
    n = 2
    xs, ws, sums = mlp_step(n)
    failures = []
    with rf.Session(cpu_devices=n, timeout=30) as sess:
        f = sess.make_callable(sums, feed_list=xs + ws)
        start = threading.Barrier(threads)

        def worker(seed):
            local = np.random.default_rng(seed)
            start.wait()
            try:
                for _ in range(steps):
                    xv = [local.standard_normal((4, 3)) for _ in xs]
                    wv = [local.standard_normal((3, 2)) for _ in ws]
                    for g in f(*xv, *wv):
                        np.testing.assert_allclose(
                            g, reference(xv, wv), rtol=1e-12, atol=1e-12)
            except BaseException as e:  # reported by the main thread
                failures.append(e)

        ts = [threading.Thread(target=worker, args=(s,))
              for s in rng.integers(1 << 30, size=threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not failures, failures[0]


def test_run_cache_follows_the_request():
    """run() reuses a prepared run per request; a list changed in place, a
    dict of fetches, other feeds: each run computes what it is asked."""
    x = rf.placeholder(rf.float64, (2,))
    a, b = x + 1.0, x * 3.0
    value = np.array([1.0, 2.0])
    with rf.Session() as sess:
        fetches = [a]
        np.testing.assert_array_equal(sess.run(fetches, {x: value})[0],
                                      [2, 3])
        fetches[0] = b
        np.testing.assert_array_equal(sess.run(fetches, {x: value})[0],
                                      [3, 6])
        d = {"v": a}
        assert sess.run(d, {x: value})["v"][1] == 3
        d["v"] = b
        assert sess.run(d, {x: value})["v"][1] == 6
        nested = [[a]]
        assert sess.run(nested, {x: value})[0][0][0] == 2
        nested[0][0] = b
        assert sess.run(nested, {x: value})[0][0][0] == 3
        v = rf.Variable(np.zeros(2))
        with pytest.raises(errors.NotFoundError):
            sess.run(v.initializer)  # added after the session
        with pytest.raises(TypeError, match="feed_dict must be a dict"):
            sess.run(a, [(x, value)])
