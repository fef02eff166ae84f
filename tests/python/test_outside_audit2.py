"""docs/PYTHON.md's promises checked from outside, second round: training
loops, optimizers, gradients, collectives, sessions, checkpoints, graph
files, device strings, errors and names as a user relies on them (each
test of a defect failed before its fix; the others pin what was found
right)."""

import threading

import ml_dtypes
import numpy as np
import pytest

import ringflow as rf
from ringflow import errors


def _names(g):
    return [op.name for op in g.get_operations()]


# ---- Variable construction adds all of its nodes or none ----

@pytest.mark.parametrize("kwargs, error", [
    (dict(name="v"), errors.AlreadyExistsError),        # the node's name
    (dict(name="bad name"), errors.InvalidArgumentError),
    (dict(name="u"), errors.AlreadyExistsError),        # "u/read" is used
    (dict(name="t", shape=(None,)), errors.AlreadyExistsError),
    (dict(name="w", shape=(4,)), errors.InvalidArgumentError),
])
def test_a_refused_variable_adds_nothing(kwargs, error):
    """PYTHON.md: a refused op adds nothing. Variable(..., name=<a name
    already used>) raised AlreadyExistsError but left its initial value's
    Const in the graph (and an invalid name did too); a name whose read or
    assign node's name was taken left the Const and the variable node."""
    g = rf.get_default_graph()
    rf.Variable(np.ones(3, np.float32), name="v")
    rf.constant(1.0, name="u/read")
    rf.constant(1.0, name="t/initial_value")
    before = _names(g)
    with pytest.raises(error):
        rf.Variable(np.ones(3, np.float32), **kwargs)
    assert _names(g) == before
    with pytest.raises(error):
        rf.Variable([1.0, 2.0, 3.0], **kwargs)
    assert _names(g) == before
    # The graph stays usable, and the name can be had once free.
    v = rf.Variable(np.ones(3, np.float32), name="fresh")
    assert v.name == "fresh"
    assert set(_names(g)) - set(before) == {
        v.op.name, v.initial_value.op.name, "fresh/read", "fresh/Assign"}


def test_a_variable_named_by_the_library_never_collides():
    """A Variable given no name was named "Variable" (or "Variable_<k>")
    whatever the names of its read and assign nodes would meet: with a node
    "Variable/read" in the graph, Variable(1.0) raised AlreadyExistsError
    and left two nodes. Now it takes the next free name."""
    g = rf.get_default_graph()
    rf.constant(1.0, name="Variable/read")
    before = len(g.get_operations())
    v = rf.Variable(1.0)
    assert v.name != "Variable"
    assert v.value().op.name == v.name + "/read"
    assert len(g.get_operations()) == before + 4
    names = [rf.Variable(float(i)).name for i in range(3)]
    assert len(set(names + [v.name])) == 4
    init = rf.global_variables_initializer()
    with rf.Session() as sess:
        sess.run(init)
        assert float(sess.run(v)) == 1.0


def test_variable_from_a_tensor_or_variable_and_relaxed_shapes_still_work():
    g = rf.get_default_graph()
    t = rf.constant(np.arange(6, dtype=np.float64).reshape(2, 3))
    a = rf.Variable(t, name="a")
    b = rf.Variable(a, name="b", shape=(None, 3))
    c = rf.Variable(np.zeros((2, 3)), name="c", shape=(None, None))
    assert (a.shape, b.shape, c.shape) == ((2, 3), (None, 3), (None, None))
    assert {"b/initial_shape", "b/initial_value", "c/initial_shape",
            "c/initial_value"} <= set(_names(g))
    assert "a/initial_value" not in _names(g)
    with rf.Session() as sess:
        sess.run(a.initializer)
        sess.run([b.initializer, c.initializer])
        np.testing.assert_array_equal(sess.run(b), sess.run(t))
        assert sess.run(c).shape == (2, 3)



def test_variable_of_a_tensor_and_another_dtype_is_refused():
    """Variable(t, dtype=rf.float64) for a float32 Tensor t made a float32
    variable, the dtype silently ignored (the docstring: the initial value
    is "converted ... to `dtype`"). A tensor is not converted, as in
    TensorFlow: InvalidArgumentError, adding nothing."""
    g = rf.get_default_graph()
    t = rf.constant([1.0, 2.0])
    v = rf.Variable(t)
    before = _names(g)
    for value in (t, v):
        with pytest.raises(errors.InvalidArgumentError, match="float64"):
            rf.Variable(value, dtype=rf.float64)
        assert _names(g) == before
    assert rf.Variable(t, dtype="float32").dtype == rf.float32
    assert rf.Variable([1, 2], dtype=rf.float64).dtype == rf.float64


# ---- checkpoints ----

def test_restore_variables_sharing_one_initial_value(tmp_path):
    """restore_variables fed each variable's value to the tensor its
    initializer assigns, all in one run: two Variables made from one
    Tensor (Adam's slots of one zeros tensor, say) were both given the
    value of the last of them."""
    zeros = rf.constant(np.zeros(3, np.float32))
    a = rf.Variable(zeros, name="a")
    b = rf.Variable(zeros, name="b")
    c = rf.Variable(zeros, name="c")
    d = rf.Variable(np.zeros(2, np.float32), name="d")
    init = rf.global_variables_initializer()
    path = tmp_path / "v.safetensors"
    want = {"a": np.array([1, 2, 3], np.float32),
            "b": np.array([4, 5, 6], np.float32),
            "c": np.array([7, 8, 9], np.float32),
            "d": np.array([10, 11], np.float32)}
    rf.checkpoint.save(path, want, step=7)
    with rf.Session() as sess:
        sess.run(init)
        assert rf.checkpoint.restore_variables(sess, path) == 7
        for v in (a, b, c, d):
            np.testing.assert_array_equal(sess.run(v), want[v.name])
        rf.checkpoint.restore_variables(sess, path, variables=[b, a, b])
        np.testing.assert_array_equal(sess.run(a), want["a"])
        np.testing.assert_array_equal(sess.run(b), want["b"])


def test_checkpoint_round_trip_of_every_dtype_and_odd_shapes(tmp_path):
    tensors = {}
    for dt in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
               np.int8, np.uint8, np.int32, np.int64, np.bool_):
        name = np.dtype(dt).name
        tensors[name] = (np.arange(12) % 3).astype(dt).reshape(3, 4)
        tensors[name + "/empty"] = np.zeros((0, 5), dt)
        tensors[name + "/scalar"] = np.array(1, dt)
        tensors[name + "/strided"] = tensors[name].T
    tensors["big-endian"] = np.arange(4, dtype=">f4")
    tensors["x" * 1024] = np.ones(2, np.float32)
    path = tmp_path / "all.safetensors"
    rf.checkpoint.save(path, tensors, step=rf.checkpoint.STEP_MAX,
                       metadata={"k": "\u00fc" * 10})
    ckpt = rf.checkpoint.load(path)
    assert list(ckpt.tensors) == list(tensors)
    assert ckpt.step == rf.checkpoint.STEP_MAX
    assert ckpt.metadata == {"k": "\u00fc" * 10}
    for name, want in tensors.items():
        got = ckpt.tensors[name]
        assert got.dtype == want.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(got, want)
    with pytest.raises(errors.InvalidArgumentError, match="1..1024"):
        rf.checkpoint.save(path, {"x" * 1025: 1.0})


# ---- names: NUL characters, long names in errors ----

@pytest.mark.parametrize("call", [
    lambda x: rf.constant(1.0, name="x\0y"),
    lambda x: rf.placeholder(rf.float32, name="x\0"),
    lambda x: rf.identity(x, name="i\0"),
    lambda x: rf.Variable(1.0, name="v\0w"),
    lambda x: rf.device("cpu:0\0junk").__enter__(),
    lambda x: rf.nccl.all_sum([x], name="s\0"),
    lambda x: rf.Session(default_device="cpu:0\0x"),
])
def test_a_nul_character_does_not_cut_a_name(call):
    """A name holding a NUL was cut there by the C library: constant(1.0,
    name="x\\0y") made a node "x" (which get_operation_by_name("x\\0zzz")
    then found), rf.device("cpu:0\\0junk") was cpu:0. Now an
    InvalidArgumentError, adding nothing."""
    with rf.device("cpu:0"):
        x = rf.placeholder(rf.float32, (2,), name="x")
    g = rf.get_default_graph()
    before = _names(g)
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        call(x)
    assert _names(g) == before


def test_a_nul_character_finds_no_node_or_attribute():
    x = rf.constant(1.0, name="x")
    g = rf.get_default_graph()
    with pytest.raises(KeyError):
        g.get_operation_by_name("x\0zzz")
    with pytest.raises(KeyError):
        g.get_tensor_by_name("x\0:0")
    with pytest.raises(KeyError):
        x.op.get_attr("dtype\0junk")
    assert x.op.get_attr("dtype") == rf.float32


def test_a_nul_byte_does_not_cut_a_checkpoint_path_name_or_value(tmp_path):
    """checkpoint.save(str(tmp_path / "m\\0junk"), ...) wrote the file "m";
    a tensor name or metadata value was cut at the NUL likewise."""
    base = tmp_path / "m"
    for call in (lambda: rf.checkpoint.save(f"{base}\0junk", {"a": 1}),
                 lambda: rf.checkpoint.save(base, {"a\0b": 1}),
                 lambda: rf.checkpoint.save(base, {"a": 1},
                                            metadata={"k": "v\0w"}),
                 lambda: rf.checkpoint.save(base, {"a": 1},
                                            metadata={"k\0": "v"})):
        with pytest.raises(errors.InvalidArgumentError, match="NUL"):
            call()
        assert not base.exists()
    rf.checkpoint.save(base, {"a": 1})
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        rf.checkpoint.load(f"{base}\0junk")
    assert rf.checkpoint.load(base).tensors["a"] == 1


def test_session_paths_take_path_objects_and_refuse_nul(tmp_path):
    """trace_next_run(path) and dump_graph_dir: a pathlib.Path was a
    TypeError for the trace ("a name must be a str"), and a NUL cut the
    path short."""
    y = rf.constant(1.0) * 2.0
    trace = tmp_path / "trace.json"
    with rf.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match="NUL"):
            sess.trace_next_run(f"{trace}\0junk")
        sess.trace_next_run(trace)
        sess.run(y)
    assert trace.exists()
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        rf.Session(dump_graph_dir=f"{tmp_path}/d\0junk")
    with rf.Session(dump_graph_dir=tmp_path / "dump") as sess:
        sess.run(y)
    assert any((tmp_path / "dump").iterdir())


@pytest.mark.parametrize("length", [150, 196, 200, 201, 5000])
def test_node_name_of_errors_is_the_node_whatever_its_length(length):
    """OpError.node_name: "the first node the message names". The C
    messages cut a name past 200 bytes to its first 200 and "... (N
    bytes)", and node_name was that cut text, no node's name
    (get_operation_by_name(e.node_name) raised KeyError). Now the node's
    full name where the graph has it."""
    name = "v" * length
    v = rf.Variable(1.0, name=name)
    p = rf.placeholder(rf.float32, (2,), name="p" * length)
    y = p + 1.0
    g = rf.get_default_graph()
    with rf.Session() as sess:
        with pytest.raises(errors.FailedPreconditionError) as e:
            sess.run(v)
        assert e.value.node_name == name + "/read"
        with pytest.raises(errors.InvalidArgumentError) as e:
            sess.run(y, {p: [1.0, 2.0, 3.0]})
        assert e.value.node_name == "p" * length
        g.get_operation_by_name(e.value.node_name)
    with pytest.raises(errors.AlreadyExistsError) as e:
        rf.constant(1.0, name="p" * length)
    assert e.value.node_name == "p" * length
    with pytest.raises(errors.InvalidArgumentError) as e:
        rf.add(rf.placeholder(rf.float32, (3,), name="q" * length),
               rf.placeholder(rf.float32, (2,)), name="a" * length)
    assert e.value.node_name == ("a" * length if length <= 200 else None)


# ---- what was checked and found right ----

def _np_optimizer(kind, w, grads):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        if kind == "sgd":
            w = w - 0.1 * g
        elif kind in ("momentum", "nesterov"):
            m = 0.9 * m + g
            w = w - (0.1 * m if kind == "momentum" else
                     0.1 * g + 0.1 * 0.9 * m)
        else:
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            if kind == "adam":
                lr = 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
                w = w - lr * m / (np.sqrt(v) + 1e-8)
            else:
                mh, vh = m / (1 - 0.9**t), v / (1 - 0.999**t)
                w = w - 0.01 * (mh / (np.sqrt(vh) + 1e-8) + 0.1 * w)
    return w


@pytest.mark.parametrize("kind", ["sgd", "momentum", "nesterov", "adam",
                                  "adamw"])
@pytest.mark.parametrize("group", [True, False])
def test_optimizers_match_a_float64_reference(kind, group, rng):
    w0 = rng.standard_normal(5)
    grads = [rng.standard_normal(5) for _ in range(4)]
    w = rf.Variable(w0, name="w")
    g = rf.placeholder(rf.float64, (5,))
    m, v = rf.Variable(np.zeros(5)), rf.Variable(np.zeros(5))
    b1, b2 = rf.placeholder(rf.float64, ()), rf.placeholder(rf.float64, ())
    op = {"sgd": lambda: rf.apply_gradient_descent(w, 0.1, g),
          "momentum": lambda: rf.apply_momentum(w, m, 0.1, g, 0.9),
          "nesterov": lambda: rf.apply_momentum(w, m, 0.1, g, 0.9,
                                                use_nesterov=True),
          "adam": lambda: rf.apply_adam(w, m, v, b1, b2, 0.01, 0.9, 0.999,
                                        1e-8, g),
          "adamw": lambda: rf.apply_adamw(w, m, v, b1, b2, 0.01, 0.9, 0.999,
                                          1e-8, 0.1, g)}[kind]()
    init = rf.global_variables_initializer()
    with rf.Session(group_optimizer_updates=group) as sess:
        sess.run(init)
        for t, grad in enumerate(grads, 1):
            sess.run(op, {g: grad, b1: 0.9**t, b2: 0.999**t})
        np.testing.assert_allclose(sess.run(w),
                                   _np_optimizer(kind, w0, grads),
                                   rtol=1e-14, atol=1e-15)


def test_data_parallel_adam_loop_as_python_md_shows(rng):
    """Replicas on two devices, gradients averaged by all_reduce("avg"),
    Adam on each device, one make_callable call a step: the replicas stay
    bit-identical and follow a NumPy float64 reference."""
    n, d, steps = 2, 4, 30
    w0 = rng.standard_normal((d, 1))
    xs_v = [rng.standard_normal((8, d)) for _ in range(n)]
    ys_v = [x @ rng.standard_normal((d, 1)) for x in xs_v]
    xs, ys, ws, grads, losses = [], [], [], [], []
    for i in range(n):
        with rf.device(f"cpu:{i}"):
            x = rf.placeholder(rf.float64, (None, d))
            y = rf.placeholder(rf.float64, (None, 1))
            w = rf.Variable(w0)
            err = x @ w - y
            losses.append(rf.reduce_mean(err * err))
            grads += rf.gradients(losses[-1], [w])
        xs.append(x)
        ys.append(y)
        ws.append(w)
    avg = rf.collectives.all_reduce(grads, "avg")
    b1 = rf.placeholder(rf.float64, ())
    b2 = rf.placeholder(rf.float64, ())
    updates = []
    for i in range(n):
        with rf.device(f"cpu:{i}"):
            m = rf.Variable(np.zeros((d, 1)))
            v = rf.Variable(np.zeros((d, 1)))
            updates.append(rf.apply_adam(ws[i], m, v, b1, b2, 0.05, 0.9,
                                         0.999, 1e-8, avg[i]))
    init = rf.global_variables_initializer()
    with rf.Session(cpu_devices=n) as sess:
        sess.run(init)
        step = sess.make_callable([losses, updates],
                                  feed_list=xs + ys + [b1, b2])
        for t in range(1, steps + 1):
            step(*xs_v, *ys_v, 0.9**t, 0.999**t)
        got = sess.run(ws)
    np.testing.assert_array_equal(got[0], got[1])
    w = w0.copy()
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        g = np.mean([2 * x.T @ (x @ w - y) / len(x)
                     for x, y in zip(xs_v, ys_v)], axis=0)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w = w - 0.05 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (
            np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(got[0], w, rtol=1e-12, atol=1e-13)


def test_two_gradient_computations_through_one_collective():
    xs = []
    for d in range(2):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(rf.float64, (3,)))
    sums = rf.nccl.all_sum(xs)
    ys = [s * s for s in sums]
    g_first = rf.gradients(ys[0], xs)
    g_both = rf.gradients(ys, xs)
    unused = rf.placeholder(rf.float64, (3,))
    assert rf.gradients(ys, [unused, xs[0]])[0] is None
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    with rf.Session(cpu_devices=2) as sess:
        first, both = sess.run([g_first, g_both], {xs[0]: a, xs[1]: b})
    for got in first:
        np.testing.assert_array_equal(got, 2 * (a + b))
    for got in both:
        np.testing.assert_array_equal(got, 4 * (a + b))
    assert [t.device for t in g_both] == ["cpu:0", "cpu:1"]


_COLLECTIVE_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32,
                      np.float64, np.int8, np.uint8, np.int32, np.int64]


@pytest.mark.parametrize("dtype", _COLLECTIVE_DTYPES)
@pytest.mark.parametrize("shape", [(6,), (0,), (3, 0)])
def test_collectives_of_every_dtype_and_empty_tensors(dtype, shape):
    n = 3
    xs = []
    for d in range(n):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(dtype, shape))
    c = rf.collectives
    with rf.device("cpu:1"):
        reduced = c.reduce(xs)
    summed = c.all_reduce(xs)
    gathered = c.all_gather(xs)
    scattered = c.reduce_scatter(xs)
    size = int(np.prod(shape))
    vals = [(np.arange(size).reshape(shape) % 5 + i).astype(dtype)
            for i in range(n)]
    with rf.Session(cpu_devices=n) as sess:
        r, s, gth, sc = sess.run([reduced, summed, gathered, scattered],
                                 dict(zip(xs, vals)))
    total = sum(v.astype(np.float64) for v in vals).astype(dtype)
    assert reduced.device == "cpu:1"
    assert [t.device for t in summed] == ["cpu:0", "cpu:1", "cpu:2"]
    for got in [r] + s:
        assert got.dtype == np.dtype(dtype) and got.shape == shape
        np.testing.assert_array_equal(got, total)
    for got in gth:
        np.testing.assert_array_equal(got, np.concatenate(vals))
    k = shape[0] // n
    for i, got in enumerate(sc):
        np.testing.assert_array_equal(got, total[i * k:(i + 1) * k])


def test_session_use_after_close_and_threads():
    x = rf.placeholder(rf.float32, (3,))
    y = x * 2.0
    sess = rf.Session()
    f = sess.make_callable(y, [x])
    failures = []

    def work(i):
        try:
            for k in range(50):
                got = sess.run(y, {x: np.full(3, i + k, np.float32)})
                assert (got == 2 * (i + k)).all()
                assert (f(np.full(3, k, np.float32)) == 2 * k).all()
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    sess.close()
    sess.close()
    for call in (lambda: sess.run(y, {x: [1, 2, 3]}), lambda: f([1, 2, 3]),
                 lambda: sess.task, sess.sync,
                 lambda: sess.make_callable(y, [x])):
        with pytest.raises(RuntimeError, match="closed"):
            call()


def test_graph_file_round_trip_trains_the_same(tmp_path):
    xs, parts = [], []
    w = rf.Variable(np.ones(3, np.float32), name="w")
    for d in range(2):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(rf.float32, (3,), name=f"x{d}"))
            parts.append(xs[-1] * w)
    sums = rf.nccl.all_sum(parts, name="s")
    loss = rf.add_n([rf.reduce_sum(t) for t in sums], name="loss")
    gw, = rf.gradients(loss, w)
    rf.apply_gradient_descent(w, 0.1, gw, name="train")
    init = rf.global_variables_initializer()
    rf.placeholder(rf.float32, (2**40, 3), name="n" * 10000)  # shape only
    g = rf.get_default_graph()
    path = tmp_path / "g.json"
    path.write_text(g.to_json())
    g2 = rf.Graph.from_json(path.read_bytes())
    assert g2.to_json() == g.to_json()
    assert g2.get_tensor_by_name("n" * 10000).shape == (2**40, 3)
    results = []
    for graph in (g, g2):
        with rf.Session(graph, cpu_devices=2) as sess:
            sess.run(graph.get_operation_by_name(init.name))
            feeds = {graph.get_tensor_by_name("x0"): [1, 2, 3],
                     graph.get_tensor_by_name("x1"): [4, 5, 6]}
            for _ in range(3):
                sess.run(graph.get_operation_by_name("train"), feeds)
            results.append(sess.run(graph.get_tensor_by_name("w/read")))
    np.testing.assert_array_equal(results[0], results[1])


def test_error_classes_are_the_status_codes():
    for code in range(1, 16):
        cls = errors.exception_type_from_error_code(code)
        assert cls.code == code and issubclass(cls, errors.OpError)
    assert errors.exception_type_from_error_code(99) is errors.UnknownError
    names = ["CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
             "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
             "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
             "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
             "DATA_LOSS"]
    assert [getattr(errors, n) for n in names] == list(range(1, 16))
    assert issubclass(errors.InvalidArgumentError, ValueError)


def test_make_callable_refuses_a_bare_tensor_as_feed_list():
    """make_callable(y, x) said "no truth value" (bool of a Tensor); it is
    a TypeError that says to write [x]. A list, a tuple or None work."""
    g = rf.Graph()
    with g.as_default():
        x = rf.placeholder(rf.float32, (2,))
        y = x * 2.0
        c = rf.constant(1.5)
    with rf.Session(graph=g) as s:
        with pytest.raises(TypeError, match=r"feed_list must be a list"):
            s.make_callable(y, x)
        with pytest.raises(TypeError, match=r"feed_list must be a list"):
            s.make_callable(y, 3)
        for keys in ([x], (x,)):
            f = s.make_callable(y, keys)
            np.testing.assert_array_equal(
                f(np.array([1, 2], np.float32)), [2, 4])
        assert s.make_callable(c, None)() == 1.5
