"""Defects found from outside (session 34), each against the PYTHON.md line
it broke: close() beside a run in another thread, device scopes left out of
order, all-reduce-like collectives inside a device scope, bools taken as
indices or counts, checkpoint arguments of the wrong kind."""

import threading
import time

import numpy as np
import pytest

import ringflow as rf
from ringflow import checkpoint, collectives, errors, nccl


def _slow_step():
    """A graph whose one step takes a while (chained 500x500 products)."""
    g = rf.Graph()
    with g.as_default():
        x = rf.placeholder(rf.float32, (500, 500))
        y = x
        for _ in range(30):
            y = rf.matmul(y, x)
    return g, x, y


@pytest.mark.parametrize("how", ["run", "callable"])
def test_close_waits_for_a_run_in_another_thread(how):
    # "close() frees it": it must not free the session under a running step
    g, x, y = _slow_step()
    a = np.full((500, 500), 1e-3, np.float32)
    sess = rf.Session(g, threads=1)
    f = sess.make_callable(y, [x])
    got, started = [], threading.Event()

    def work():
        started.set()
        got.append(f(a) if how == "callable" else sess.run(y, {x: a}))

    t = threading.Thread(target=work)
    t.start()
    started.wait()
    time.sleep(0.01)  # the step is (very likely) in the library now
    sess.close()  # waits for it
    t.join()
    assert len(got) == 1 and got[0].shape == (500, 500)
    with pytest.raises(RuntimeError, match="the session is closed"):
        f(a)
    with pytest.raises(RuntimeError, match="the session is closed"):
        sess.run(y, {x: a})
    with pytest.raises(RuntimeError, match="the session is closed"):
        sess.sync()
    sess.close()  # idempotent


def test_runs_from_threads_then_close():
    g, x, y = _slow_step()
    a = np.full((500, 500), 1e-3, np.float32)
    with rf.Session(g, threads=2) as sess:
        f = sess.make_callable(y, [x])
        out = []
        ts = [threading.Thread(target=lambda: out.append(f(a)))
              for _ in range(4)]
        for t in ts:
            t.start()
    for t in ts:  # the with block closed the session beside them
        t.join()
    # each either ran whole or found the session closed: no crash
    assert all(o.shape == (500, 500) for o in out)


def test_device_scope_left_out_of_order():
    # generators interleave scopes: leaving one must not drop another's
    def builder(dev, name):
        with rf.device(dev):
            yield rf.constant(1.0, name=name + "_in")
        yield rf.constant(1.0, name=name + "_after")

    with rf.Graph().as_default():
        a, b = builder("cpu:1", "a"), builder("cpu:2", "b")
        assert next(a).device == "cpu:1"
        assert next(b).device == "cpu:2"
        assert next(a).device == "cpu:2"  # a's scope closed, b's open
        with rf.device("cpu:3"):
            assert rf.constant(0.0).device == "cpu:3"
        assert rf.constant(0.0).device == "cpu:2"
        assert next(b).device == ""


def test_all_reduce_like_collectives_ignore_the_device_scope():
    # "all_sum(tensors): tensor i on tensors[i]'s device" - as TensorFlow's
    with rf.Graph().as_default():
        xs = []
        for d in range(3):
            with rf.device(f"cpu:{d}"):
                xs.append(rf.constant(np.arange(6, dtype=np.float32) + d))
        with rf.device("cpu:0"):
            builds = {
                "all_sum": nccl.all_sum(xs),
                "all_max": nccl.all_max(xs),
                "all_reduce": collectives.all_reduce(xs, "min"),
                "all_gather": collectives.all_gather(xs),
                "reduce_scatter": collectives.reduce_scatter(xs),
            }
            # reduce and broadcast follow the scope (documented)
            r = collectives.reduce(xs[1:] + xs[:1])
            inner = rf.constant(0.0)
        assert inner.device == "cpu:0"  # the scope is still in effect
        assert r.device == "cpu:0"
        for name, outs in builds.items():
            assert [o.device for o in outs] == ["cpu:0", "cpu:1", "cpu:2"], \
                name
        with rf.Session(cpu_devices=3) as s:
            got = s.run(builds["all_sum"] + [r])
    want = sum(np.arange(6, dtype=np.float64) + d for d in range(3))
    for v in got:
        np.testing.assert_allclose(v, want)


@pytest.mark.parametrize("build", [
    lambda x: rf.reduce_sum(x, True),
    lambda x: rf.one_hot(rf.constant([0, 1]), depth=True),
    lambda x: rf.tile(x, [True, 2]),
    lambda x: rf.expand_dims(x, np.True_),
    lambda x: rf.concat([x, x], axis=False),
])
def test_bool_is_not_an_index(build):
    with rf.Graph().as_default():
        x = rf.constant(np.ones((2, 3), np.float32))
        with pytest.raises(TypeError, match="must be an int, not bool"):
            build(x)


@pytest.mark.parametrize("option", ["cpu_devices", "threads",
                                    "bucket_bytes"])
def test_bool_is_not_a_count(option):
    with pytest.raises(TypeError, match=f"{option} must be an int, not bool"):
        rf.Session(rf.Graph(), **{option: True})


def test_checkpoint_save_argument_kinds(tmp_path):
    p = tmp_path / "c.safetensors"
    with pytest.raises(TypeError, match="metadata value 3 must be a str"):
        checkpoint.save(p, {"w": np.ones(2, np.float32)},
                        metadata={"epoch": 3})
    with pytest.raises(TypeError, match="metadata key 1 must be a str"):
        checkpoint.save(p, {"w": np.ones(2, np.float32)}, metadata={1: "a"})
    with pytest.raises(TypeError, match="tensors must be a mapping"):
        checkpoint.save(p, [("w", np.ones(2, np.float32))])
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        checkpoint.save(p, {"w": np.ones(2, np.float32)}, metadata=["a"])
    assert not p.exists()


def test_transpose_without_perm_of_unknown_rank():
    with rf.Graph().as_default():
        x = rf.placeholder(rf.float32, None)
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"no perm \(the dims reversed\) needs x's "
                                 "rank known"):
            rf.transpose(x)


def test_wrong_kinds_are_type_errors():
    with rf.Graph().as_default() as g:
        with pytest.raises(TypeError, match="dtype resource"):
            rf.constant(1.0, dtype=rf.resource)
        with pytest.raises(TypeError, match="takes a str, not int"):
            g.get_tensor_by_name(5)
        with pytest.raises(TypeError, match="must be a str, not int"):
            g.get_operation_by_name(5)


def test_a_handle_converts_values_as_its_variable():
    with rf.Graph().as_default():
        v = rf.Variable(np.zeros(2), dtype=rf.float64)
        set_ = rf.assign(v.handle, [7, 8])  # int values, float64 variable
        step = rf.apply_gradient_descent(v.handle, 0.5, np.ones(2))
        with rf.Session() as s:
            s.run(v.initializer)
            s.run(set_)
            np.testing.assert_array_equal(s.run(v), [7.0, 8.0])
            s.run(step)
            np.testing.assert_array_equal(s.run(v), [6.5, 7.5])


def test_one_hot_integer_values_are_checked():
    idx = rf.constant([1, 0])
    with pytest.raises(TypeError, match="on_value 0.5 is not a whole"):
        rf.one_hot(idx, 2, on_value=0.5, dtype=rf.int32)
    with pytest.raises(OverflowError, match="on_value 300"):
        rf.one_hot(idx, 2, on_value=300, dtype=rf.uint8)
    with pytest.raises(OverflowError, match="off_value -200"):
        rf.one_hot(idx, 2, off_value=-200, dtype=rf.int8)
    y = rf.one_hot(idx, 2, on_value=5, off_value=-1, dtype=rf.int64)
    with rf.Session() as s:
        assert s.run(y).tolist() == [[-1, 5], [5, -1]]


@pytest.mark.parametrize("fill", [np.float64(0.5), np.float32(2.75)])
def test_pad_numpy_float_on_integers(fill):
    with pytest.raises(TypeError, match="not a whole number"):
        rf.pad(rf.constant([1, 2]), [[1, 1]], constant_values=fill)
