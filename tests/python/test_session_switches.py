"""Session(allow_tf32=..., gpu_graphs=...): the C options' switches from
Python. Each reaches the session (the library refuses a value other than
0 or 1, naming the option); on CPU devices both are documented as ignored,
so a small MLP step gives the same bits with them on as off, against NumPy
in float64; on a GPU (skipped without one), a repeated step replayed as a
CUDA graph gives the same bits as without."""

import numpy as np
import pytest

import ringflow as rf
from ringflow import errors


def build(device):
    """y = relu(x w1) w2 on `device`, w fixed."""
    rng = np.random.default_rng(11)
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)
    g = rf.Graph()
    with g.as_default(), rf.device(device):
        x = rf.placeholder(np.float32, (None, 8))
        h = rf.nn.relu(rf.matmul(x, rf.constant(w1)))
        y = rf.matmul(h, rf.constant(w2))
    return g, x, y, w1, w2


def steps(device, gpu_devices=0, **switches):
    g, x, y, w1, w2 = build(device)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((6, 8)).astype(np.float32) for _ in range(4)]
    with rf.Session(g, gpu_devices=gpu_devices, **switches) as s:
        ys = [s.run(y, {x: v}) for v in xs]
    return xs, ys, w1, w2


@pytest.mark.parametrize("name", ["allow_tf32", "gpu_graphs"])
def test_values_reach_the_session(name):
    g, _, _, _, _ = build("cpu:0")
    for bad in (2, -1):
        with pytest.raises(errors.InvalidArgumentError,
                           match=f"{name} must be 0 or 1, got {bad}"):
            rf.Session(g, **{name: bad})
    with pytest.raises(TypeError):
        rf.Session(g, **{name: "on"})
    for ok in (True, False, 0, 1, None):
        rf.Session(g, **{name: ok}).close()


def test_cpu_ignores_them():
    xs, plain, w1, w2 = steps("cpu:0")
    _, switched, _, _ = steps("cpu:0", allow_tf32=True, gpu_graphs=True)
    for x, a, b in zip(xs, plain, switched):
        assert a.tobytes() == b.tobytes()
        want = np.maximum(x.astype(np.float64) @ w1, 0) @ w2
        np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-5)


def test_gpu_graphs_same_bits():
    try:
        steps("gpu:0", gpu_devices=1)
    except errors.FailedPreconditionError as e:
        pytest.skip(f"no GPU: {e}")
    _, plain, _, _ = steps("gpu:0", gpu_devices=1, gpu_graphs=False)
    _, graphed, _, _ = steps("gpu:0", gpu_devices=1, gpu_graphs=True)
    for a, b in zip(plain, graphed):
        assert a.tobytes() == b.tobytes()


def test_matmul_epilogues():
    """"all" rewrites MatMul -> BiasAdd -> Relu into one fused node on CPU
    devices too, with the unfused graph's bits; "off", "gpu", "auto" and the
    default ("auto": float32 on GPU devices) leave a CPU graph alone; other
    values raise."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    g = rf.Graph()
    with g.as_default(), rf.device("cpu:0"):
        x = rf.placeholder(np.float32, (None, 8))
        y = rf.nn.relu(rf.nn.bias_add(rf.matmul(x, rf.constant(w)),
                                      rf.constant(b)))
    kinds = {mode: [op.type for op in
                    rf.lower(g, matmul_epilogues=mode).get_operations()]
             for mode in (None, "off", "gpu", "auto", "all")}
    assert "_FusedMatMulBiasRelu" in kinds["all"]
    assert "MatMul" not in kinds["all"]
    for mode in (None, "off", "gpu", "auto"):
        assert "_FusedMatMulBiasRelu" not in kinds[mode]
        assert "MatMul" in kinds[mode]
    v = rng.standard_normal((5, 8)).astype(np.float32)
    got = {}
    for mode in ("off", "all"):
        with rf.Session(g, matmul_epilogues=mode) as s:
            got[mode] = s.run(y, {x: v})
    np.testing.assert_array_equal(got["all"], got["off"])
    want = np.maximum(v.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(got["all"], want, rtol=1e-5, atol=1e-5)
    for bad in ("on", "GPU", "AUTO", 1):
        with pytest.raises(ValueError, match="matmul_epilogues"):
            rf.Session(g, matmul_epilogues=bad)


def test_conv_epilogues():
    """"all" rewrites Conv2D -> BiasAdd -> Relu into one fused node on CPU
    devices too, with the unfused graph's bits; "off", "gpu" and the
    default ("gpu") leave a CPU graph alone; other values raise."""
    rng = np.random.default_rng(4)
    f = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    g = rf.Graph()
    with g.as_default(), rf.device("cpu:0"):
        x = rf.placeholder(np.float32, (None, 5, 5, 2))
        y = rf.nn.relu(rf.nn.bias_add(
            rf.nn.conv2d(x, rf.constant(f), [1, 1, 1, 1], "SAME"),
            rf.constant(b)))
    kinds = {mode: [op.type for op in
                    rf.lower(g, conv_epilogues=mode).get_operations()]
             for mode in (None, "off", "gpu", "all")}
    assert "_FusedConv2DBiasRelu" in kinds["all"]
    assert "Conv2D" not in kinds["all"]
    for mode in (None, "off", "gpu"):
        assert "_FusedConv2DBiasRelu" not in kinds[mode]
        assert "Conv2D" in kinds[mode]
    v = rng.standard_normal((2, 5, 5, 2)).astype(np.float32)
    got = {}
    for mode in ("off", "all"):
        with rf.Session(g, conv_epilogues=mode) as s:
            got[mode] = s.run(y, {x: v})
    np.testing.assert_array_equal(got["all"], got["off"])
    # float64 reference: SAME padding of 1 for a 3x3 window, stride 1.
    p = np.pad(v.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((2, 5, 5, 4))
    for i in range(3):
        for j in range(3):
            want += p[:, i:i + 5, j:j + 5, :] @ f[i, j].astype(np.float64)
    want = np.maximum(want + b, 0)
    np.testing.assert_allclose(got["all"], want, rtol=1e-5, atol=1e-5)
    for bad in ("on", "GPU", "auto", 1):
        with pytest.raises(ValueError, match="conv_epilogues"):
            rf.Session(g, conv_epilogues=bad)


@pytest.mark.parametrize("option,value", [
    ("cpu_devices", 2**40), ("gpu_devices", -(2**40)), ("threads", 2**31),
    ("bucket_bytes", 2**70), ("allow_tf32", 2**40), ("gpu_graphs", 2**32),
    ("timeout", float("inf")), ("timeout", float("nan")),
    ("timeout", 1e300)])
def test_option_out_of_range_is_invalid_argument(option, value):
    """A number past what the C option holds is the library's error class
    (InvalidArgumentError naming the option), not an OverflowError or
    ValueError from the conversion."""
    with pytest.raises(errors.InvalidArgumentError, match=option):
        rf.Session(rf.Graph(), **{option: value})


@pytest.mark.parametrize("name", ["gpu_sync_on_finish", "allow_tf32",
                                  "gpu_graphs", "group_optimizer_updates"])
def test_every_switch_takes_one_rule(name):
    """Each on/off option takes True, False, 0 and 1, NumPy's bools and
    ints too (np.True_ was a TypeError "expected True or False, not
    bool"); another int is InvalidArgumentError naming the option
    (gpu_sync_on_finish=2 was taken as on), another type TypeError."""
    g = rf.Graph()
    for ok in (True, False, 0, 1, np.True_, np.False_, np.int64(1), None):
        rf.Session(g, **{name: ok}).close()
    with pytest.raises(errors.InvalidArgumentError,
                       match=f"{name} must be 0 or 1, got 2"):
        rf.Session(g, **{name: 2})
    for bad in ("on", 1.0, np.float64(0.0)):
        with pytest.raises(TypeError, match=name):
            rf.Session(g, **{name: bad})


def test_timeout_values():
    """timeout: a positive number of seconds (NumPy's too), rounded to
    whole milliseconds but at least 1 ms (1e-4 was 0 ms, refused as
    "collective_timeout_ms must be > 0"); at most 1e9 seconds, past that
    InvalidArgumentError saying so (1e30 was "not finite"); a str or bool
    is a TypeError ("5" was taken)."""
    g = rf.Graph()
    for ok in (1e-4, 0.0004, 0.5, 300, np.float32(2.5), np.int64(5), 1e9):
        rf.Session(g, timeout=ok).close()
    for bad in (0, 0.0, -1, float("nan")):
        with pytest.raises(errors.InvalidArgumentError,
                           match="timeout must be a number of seconds > 0"):
            rf.Session(g, timeout=bad)
    for bad in (1e9 + 1, 1e30, float("inf"), 10**400):
        with pytest.raises(errors.InvalidArgumentError,
                           match="timeout must be at most 1000000000"):
            rf.Session(g, timeout=bad)
    for bad in ("5", True, np.True_, [5]):
        with pytest.raises(TypeError, match="timeout"):
            rf.Session(g, timeout=bad)


def test_longest_timeout_does_not_expire_at_once():
    """With the longest timeout the collectives' deadlines (in nanoseconds)
    do not overflow: steps of an all-reduce succeed (9e15 s, once taken,
    made a step fail with DeadlineExceededError at once)."""
    g = rf.Graph()
    with g.as_default():
        xs = []
        for d in range(3):
            with rf.device(f"cpu:{d}"):
                xs.append(rf.placeholder(rf.float32, (2,)))
        sums = rf.collectives.all_reduce(xs)
    feeds = {x: np.full(2, i + 1, np.float32) for i, x in enumerate(xs)}
    with rf.Session(g, cpu_devices=3, timeout=1e9) as sess:
        for _ in range(50):
            for v in sess.run(sums, feeds):
                np.testing.assert_array_equal(v, [6, 6])


@pytest.mark.parametrize("option", ["cpu_devices", "gpu_devices", "threads",
                                    "bucket_bytes"])
def test_count_option_is_not_cut(option):
    """A count must be an int: 2.7 is a TypeError, not 2."""
    with pytest.raises(TypeError):
        rf.Session(rf.Graph(), **{option: 2.7})
    ok = 0 if option == "gpu_devices" else 1  # no GPU needed
    rf.Session(rf.Graph(), **{option: np.int64(ok)}).close()


def adam_graph():
    """Two float64 variables, each updated by ApplyAdam with the same
    scalar inputs: what group_optimizer_updates groups into one node."""
    rng = np.random.default_rng(17)
    g = rf.Graph()
    with g.as_default(), rf.device("cpu:0"):
        init = [rng.standard_normal(s) for s in ((3, 4), (5,))]
        grads = [rng.standard_normal(s) for s in ((3, 4), (5,))]
        hyper = [rf.constant(v, rf.float64)
                 for v in (0.9, 0.999, 0.01, 0.9, 0.999, 1e-7)]
        vs, ops = [], []
        for i, (v0, gr) in enumerate(zip(init, grads)):
            v = rf.Variable(v0, name=f"w{i}")
            m = rf.Variable(np.zeros_like(v0), name=f"m{i}")
            s = rf.Variable(np.zeros_like(v0), name=f"v{i}")
            ops.append(rf.apply_adam(v, m, s, *hyper, gr))
            vs.append(v)
        step = rf.group(*ops)
        initializer = rf.global_variables_initializer()
    return g, vs, step, initializer, init, grads


@pytest.mark.parametrize("on", [True, False, 1, 0, None])
def test_group_optimizer_updates(on):
    """Session(group_optimizer_updates=...) and lower(...) reach
    rf_session_options.group_optimizer_updates: on (and the default) the
    two updates are one _MultiApplyAdam node, off two ApplyAdam nodes; the
    values are TensorFlow's ApplyAdam either way, against NumPy in
    float64."""
    g, vs, step, initializer, init, grads = adam_graph()
    ops = [o.type for o in rf.lower(g, group_optimizer_updates=on)
           .get_operations()]
    grouped = on is None or bool(on)
    assert ops.count("_MultiApplyAdam") == (1 if grouped else 0)
    assert ops.count("ApplyAdam") == (0 if grouped else 2)
    with rf.Session(g, group_optimizer_updates=on) as s:
        s.run(initializer)
        s.run(step)
        got = s.run(vs)
    lr_t = 0.01 * np.sqrt(1 - 0.999) / (1 - 0.9)
    for v0, gr, v in zip(init, grads, got):
        m, s2 = 0.1 * gr, 0.001 * gr * gr
        np.testing.assert_allclose(v, v0 - lr_t * m / (np.sqrt(s2) + 1e-7),
                                   rtol=1e-12, atol=1e-12)


def test_group_optimizer_updates_refused():
    g, _, _, _, _, _ = adam_graph()
    for bad in (2, -1):
        with pytest.raises(errors.InvalidArgumentError,
                           match="group_optimizer_updates must be 0 or 1"):
            rf.Session(g, group_optimizer_updates=bad)
    with pytest.raises(TypeError):
        rf.Session(g, group_optimizer_updates="off")


def test_dump_graph_dir(tmp_path, monkeypatch):
    """Session(dump_graph_dir=...) is rf_session_options.dump_graph_dir:
    each compile writes the graph before and after every phase there
    (the directory made when missing), and "" writes none whatever
    RF_DUMP_GRAPH_DIR says."""
    g = rf.Graph()
    with g.as_default():
        x = rf.placeholder(np.float32, (3,))
        y = rf.nn.relu(x)
    where = tmp_path / "dumps" / "a"
    with rf.Session(g, dump_graph_dir=str(where)) as s:
        np.testing.assert_array_equal(
            s.run(y, {x: np.array([-1, 0, 2], np.float32)}), [0, 0, 2])
    names = sorted(p.name for p in where.iterdir())
    assert any(n.endswith("_prune_before.json") for n in names), names
    assert any(n.endswith("_placement_after.dot") for n in names), names
    env = tmp_path / "env"
    monkeypatch.setenv("RF_DUMP_GRAPH_DIR", str(env))
    with rf.Session(g, dump_graph_dir="") as s:
        s.run(y, {x: np.zeros(3, np.float32)})
    assert not env.exists()
    rf.lower(g, dump_graph_dir=str(tmp_path / "lowered"))
    assert any((tmp_path / "lowered").iterdir())
    with pytest.raises(TypeError):
        rf.Session(g, dump_graph_dir=3)
