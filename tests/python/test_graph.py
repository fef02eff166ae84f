"""Graph building in TensorFlow 1 style: default graphs, device scopes,
placeholders, constants, every op function and Tensor operator against
NumPy in float64, tensor attributes, variables and gradients."""

import ml_dtypes
import numpy as np
import pytest

import ringflow as rf
from ringflow import errors


def run(fetches, feeds=None, **session):
    with rf.Session(rf.get_default_graph(), **session) as sess:
        return sess.run(fetches, feeds)


def test_default_graph_and_as_default():
    g = rf.Graph()
    assert rf.get_default_graph() is not g
    with g.as_default() as inner:
        assert inner is g and rf.get_default_graph() is g
        x = rf.constant(1.0)
        with rf.Graph().as_default() as h:
            assert rf.get_default_graph() is h
        assert rf.get_default_graph() is g
        with pytest.raises(AssertionError):
            rf.reset_default_graph()
    assert x.graph is g and len(g.get_operations()) == 1
    outer = rf.get_default_graph()
    rf.reset_default_graph()
    assert rf.get_default_graph() is not outer


def test_device_scopes():
    with rf.device("cpu:1"):
        a = rf.placeholder(rf.float32, name="a")
        with rf.device("/task:1/gpu:0"):
            b = rf.placeholder(rf.float32, name="b")
        with rf.device("/device:GPU:2"):
            c = rf.placeholder(rf.float32)
        with rf.device(None):
            d = rf.placeholder(rf.float32)
        e = rf.placeholder(rf.float32)
    assert (a.device, b.device, c.device, d.device, e.device) == (
        "cpu:1", "/task:1/gpu:0", "gpu:2", "", "cpu:1")
    assert a.op.device == "cpu:1"
    with pytest.raises(rf.errors.InvalidArgumentError, match="tpu:0"):
        with rf.device("tpu:0"):
            pass


def test_tensor_attributes():
    x = rf.placeholder(rf.float32, (None, 3), name="x")
    y = rf.matmul(x, rf.constant(np.ones((3, 5), np.float32)), name="y")
    assert x.name == "x:0" and y.name == "y:0"
    assert x.shape == (None, 3) and y.shape == (None, 5)
    assert x.get_shape() == x.shape
    assert rf.placeholder(rf.int64).shape is None
    assert y.dtype == np.float32 and y.dtype is rf.float32
    assert y.op.type == "MatMul" and y.op.name == "y"
    assert y.op.inputs[0] == x and y.value_index == 0
    assert y.op.outputs == [y]
    assert rf.get_default_graph().get_tensor_by_name("y:0") == y
    assert rf.get_default_graph().get_operation_by_name("x") == x.op
    assert x.op.get_attr("dtype") == np.float32
    assert x.op.get_attr("shape") == (None, 3)
    with pytest.raises(KeyError):
        x.op.get_attr("no_such_attr")
    with pytest.raises(TypeError):
        bool(x)
    assert {x: 1}[rf.get_default_graph().get_tensor_by_name("x:0")] == 1
    assert "x:0" in repr(x)
    # the index as graph files write it, nothing else (GRAPH_FORMAT.md)
    for bad in ("y:00", "y:01", "y:+0", "y: 0", "y:", "y:\u0661", "y:1"):
        with pytest.raises(KeyError):
            rf.get_default_graph().get_tensor_by_name(bad)


@pytest.mark.parametrize("dtype", [rf.float16, rf.bfloat16, rf.float32,
                                   rf.float64, rf.int8, rf.uint8, rf.int32,
                                   rf.int64, rf.bool])
def test_dtypes_round_trip(dtype, rng):
    assert rf.as_dtype(dtype.name) == dtype
    value = (rng.random((2, 3)) * 100).astype(dtype)
    x = rf.placeholder(dtype, (2, 3))
    c = rf.constant(value)
    assert x.dtype == dtype and c.dtype == dtype
    got_x, got_c = run([rf.identity(x), c], {x: value})
    assert got_x.dtype == dtype and got_c.dtype == dtype
    np.testing.assert_array_equal(got_x, value)
    np.testing.assert_array_equal(got_c, value)


def test_dtype_mapping():
    assert rf.float16 == np.float16
    assert rf.bfloat16 == ml_dtypes.bfloat16
    assert rf.as_dtype("bfloat16") == ml_dtypes.bfloat16
    assert rf.as_dtype(np.int32) == rf.int32
    with pytest.raises(TypeError, match="ringflow has no complex64"):
        rf.as_dtype(np.complex64)
    # NumPy reads a byte-swapped dtype as the same dtype: so does ringflow
    assert rf.as_dtype(">f4") == rf.float32
    assert rf.as_dtype(np.dtype(">i8")) == rf.int64


def test_byte_swapped_constant():
    """An array of another byte order is a constant of its dtype, its values
    as given."""
    value = np.arange(6, dtype=">f8").reshape(2, 3)
    with rf.Graph().as_default() as g:
        c = rf.constant(value)
        assert c.dtype == rf.float64
        with rf.Session(g) as sess:
            np.testing.assert_array_equal(sess.run(c), value)


def test_constant_defaults():
    """Python values take TensorFlow's dtypes; arrays keep theirs."""
    assert rf.constant(1.5).dtype == rf.float32
    assert rf.constant([1, 2]).dtype == rf.int32
    assert rf.constant(2**40).dtype == rf.int64
    assert rf.constant(True).dtype == rf.bool
    assert rf.constant(np.float64(1)).dtype == rf.float64
    assert rf.constant(1, dtype=rf.float16).dtype == rf.float16
    assert rf.constant(0.0, shape=(2, 3)).shape == (2, 3)
    assert rf.constant([1, 2, 3, 4], shape=[2, 2]).shape == (2, 2)
    with pytest.raises(TypeError):
        rf.constant("text")
    with pytest.raises(ValueError, match="rank 9"):
        rf.constant(np.zeros((1,) * 9, np.float32))


def test_arithmetic_and_operators(rng):
    a = rng.standard_normal((4, 3))
    b = rng.standard_normal((4, 3)) + 3.0
    m = rng.standard_normal((3, 2))
    x = rf.placeholder(rf.float64, (4, 3))
    y = rf.placeholder(rf.float64, (4, 3))
    w = rf.constant(m)
    exprs = [x + y, x - y, x * y, x / y, -x, x @ w, 2.0 * x, x - 1.0,
             1.0 / y, a @ w, rf.add(x, y), rf.subtract(x, y),
             rf.multiply(x, y), rf.divide(x, y), rf.negative(x),
             rf.add_n([x, y, x]), rf.matmul(x, w), rf.equal(x, x),
             rf.matmul(x, x, transpose_a=True),
             rf.matmul(x, x, transpose_b=True)]
    want = [a + b, a - b, a * b, a / b, -a, a @ m, 2 * a, a - 1, 1 / b,
            a @ m, a + b, a - b, a * b, a / b, -a, 2 * a + b, a @ m,
            np.ones((4, 3), bool), a.T @ a, a @ a.T]
    got = run(exprs, {x: a, y: b})
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=1e-12, atol=1e-12)


def test_broadcasting_and_integer_division():
    x = rf.constant(np.array([[7], [-7]], np.int32))
    y = rf.constant(np.array([2, 3, -4], np.int32))
    got = run(x / y)
    want = np.trunc(np.array([[7], [-7]]) / np.array([2, 3, -4]))
    np.testing.assert_array_equal(got, want.astype(np.int32))
    with pytest.raises(rf.errors.InvalidArgumentError):
        run(x / rf.constant(np.int32(0)))


def test_nn_ops(rng):
    logits = rng.standard_normal((5, 4))
    labels = rng.integers(0, 4, 5)
    bias = rng.standard_normal(4)
    lg = rf.constant(logits)
    loss = rf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                          logits=lg)
    outs = run([rf.nn.relu(lg), rf.nn.sigmoid(lg), rf.nn.tanh(lg),
                rf.nn.softmax(lg), rf.nn.bias_add(lg, bias), loss,
                loss.op.outputs[1]])
    e = np.exp(logits - logits.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    onehot = np.eye(4)[labels]
    want = [np.maximum(logits, 0), 1 / (1 + np.exp(-logits)),
            np.tanh(logits), sm, logits + bias,
            -np.log(sm[np.arange(5), labels]), sm - onehot]
    for g, w in zip(outs, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_reductions_and_shapes(rng):
    a = rng.standard_normal((2, 3, 4))
    x = rf.constant(a)
    outs = run([rf.reduce_sum(x), rf.reduce_sum(x, 1),
                rf.reduce_sum(x, [0, -1], keepdims=True), rf.reduce_mean(x),
                rf.reduce_mean(x, axis=2), rf.argmax(x, 1),
                rf.reshape(x, [4, -1]), rf.reshape(x, rf.constant([6, 4])),
                rf.shape(x), rf.shape(x, out_type=rf.int64),
                rf.fill(rf.constant([2, 2]), 7.0), rf.zeros_like(x),
                rf.ones_like(x), rf.cast(x, rf.int32)])
    want = [a.sum(), a.sum(1), a.sum((0, 2), keepdims=True), a.mean(),
            a.mean(2), a.argmax(1), a.reshape(4, -1), a.reshape(6, 4),
            np.array([2, 3, 4]), np.array([2, 3, 4]), np.full((2, 2), 7.0),
            np.zeros_like(a), np.ones_like(a), a.astype(np.int32)]
    for g, w in zip(outs, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert outs[5].dtype == np.int64 and outs[8].dtype == np.int32
    one = rf.constant([5.0])
    assert rf.reshape(one, ()).shape == () and rf.reshape(x, 24).shape == (24,)


def test_building_errors_leave_the_graph_usable():
    x = rf.placeholder(rf.float32, (2, 3))
    with pytest.raises(rf.errors.InvalidArgumentError, match="MatMul") as e:
        rf.matmul(x, x, name="bad")
    assert e.value.node_name == "bad"
    n = len(rf.get_default_graph().get_operations())
    y = rf.matmul(x, x, transpose_b=True)
    assert y.shape == (2, 2)
    assert len(rf.get_default_graph().get_operations()) == n + 1
    rf.identity(x, name="twice")
    with pytest.raises(rf.errors.AlreadyExistsError, match="'twice'"):
        rf.identity(x, name="twice")
    with pytest.raises(ValueError, match="another graph"):
        with rf.Graph().as_default():
            rf.add(x, rf.constant(1.0, shape=(2, 3)))


def test_variables_and_optimizer_ops():
    v = rf.Variable(np.array([1.0, 2.0, 3.0], np.float32), name="v")
    assert v.name == "v" and v.dtype == rf.float32 and v.shape == (3,)
    assert v.handle.dtype is rf.resource
    step = rf.apply_gradient_descent(v, 0.5, np.ones(3, np.float32))
    doubled = v * 2.0
    init = rf.global_variables_initializer()
    assign = v.assign([9.0, 8.0, 7.0])
    read = v.read_value()
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="value has shape \\(4\\) but variable 'v'"):
        rf.assign(v, np.zeros(4, np.float32))
    anything = rf.placeholder(rf.float32)
    bad = rf.assign(v, anything)
    with rf.Session() as sess:
        with pytest.raises(rf.errors.FailedPreconditionError,
                           match="'v'"):
            sess.run(v)
        assert sess.run(init) is None
        np.testing.assert_array_equal(sess.run(v), [1, 2, 3])
        sess.run(step)
        np.testing.assert_array_equal(sess.run(v.value()), [0.5, 1.5, 2.5])
        np.testing.assert_array_equal(sess.run(doubled), [1, 3, 5])
        sess.run(assign)
        np.testing.assert_array_equal(sess.run(read), [9, 8, 7])
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="shape"):
            sess.run(bad, {anything: np.zeros(4, np.float32)})
        np.testing.assert_array_equal(sess.run(v), [9, 8, 7])
    assert rf.global_variables() == [v]


def test_apply_adam_matches_numpy():
    shape = (4,)
    var = rf.Variable(np.full(shape, 1.0), name="var")
    m = rf.Variable(np.zeros(shape), name="m")
    v = rf.Variable(np.zeros(shape), name="v")
    g = np.array([0.1, -0.2, 0.3, 0.0])
    lr, b1, b2, eps, b1p, b2p = 0.01, 0.9, 0.999, 1e-8, 0.9, 0.999
    op = rf.apply_adam(var, m, v, b1p, b2p, lr, b1, b2, eps, g)
    init = rf.global_variables_initializer()
    with rf.Session() as sess:
        sess.run(init)
        sess.run(op)
        got = sess.run(var)
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    m_ = (1 - b1) * g
    v_ = (1 - b2) * g * g
    np.testing.assert_allclose(got, 1.0 - lr_t * m_ / (np.sqrt(v_) + eps),
                               rtol=1e-12)


def test_gradients_against_numpy(rng):
    """d(sum(relu(x w)))/dw for an MLP layer, and an unconnected x."""
    a = rng.standard_normal((5, 3))
    m = rng.standard_normal((3, 2))
    x = rf.placeholder(rf.float64, (5, 3))
    w = rf.Variable(m)
    unused = rf.placeholder(rf.float64, (2,))
    loss = rf.reduce_sum(rf.relu(x @ w))
    dw, dx, du = rf.gradients(loss, [w, x, unused])
    assert du is None and dw.shape == (3, 2)
    weighted, = rf.gradients([x * 2.0], [x], grad_ys=[np.full((5, 3), 3.0)])
    with rf.Session() as sess:
        sess.run(w.initializer)
        got_w, got_x, got_weighted = sess.run([dw, dx, weighted], {x: a})
    mask = (a @ m > 0).astype(np.float64)
    np.testing.assert_allclose(got_w, a.T @ mask, rtol=1e-12)
    np.testing.assert_allclose(got_x, mask @ m.T, rtol=1e-12)
    np.testing.assert_allclose(got_weighted, np.full((5, 3), 6.0))
    with pytest.raises(ValueError, match="grad_ys"):
        rf.gradients([loss], [x], grad_ys=[1.0, 2.0])


def test_group_and_no_op():
    v = rf.Variable(1.0)
    w = rf.Variable(2.0)
    g = rf.group(v.initializer, w.initializer, name="init")
    assert g.type == "NoOp" and set(g.control_inputs) == {
        v.initializer, w.initializer}
    nothing = rf.no_op()
    with rf.Session() as sess:
        sess.run(g)
        assert sess.run([v, w]) == [1.0, 2.0]
        assert sess.run(nothing) is None
        late = rf.no_op(name="late")
        with pytest.raises(rf.errors.NotFoundError,
                           match="added to the graph after the Session"):
            sess.run(late)


def test_json_round_trip():
    with rf.device("cpu:1"):
        x = rf.placeholder(rf.float32, (2,), name="x")
        rf.identity(x * 2.0, name="y")
    g = rf.Graph.from_json(rf.get_default_graph().to_json())
    y = g.get_tensor_by_name("y")
    assert y.device == "cpu:1"
    assert "digraph" in g.to_dot()
    with rf.Session(g, cpu_devices=2) as sess:
        np.testing.assert_array_equal(
            sess.run(y, {g.get_tensor_by_name("x:0"): [1.0, 2.0]}), [2, 4])


def test_fetch_structures():
    """Lists, tuples, named tuples and dicts, nested, come back with the
    same structure; Operations give None."""
    import collections
    Pair = collections.namedtuple("Pair", "a b")
    x = rf.constant(1.0)
    y = rf.constant([2, 3])
    op = rf.no_op()
    with rf.Session() as sess:
        got = sess.run({"p": Pair(x, [y, op]), "t": (x,), "x": x})
        assert sess.run([]) == [] and sess.run(op) is None
    assert isinstance(got["p"], Pair) and got["p"].b[1] is None
    assert got["p"].a == 1.0 and list(got["p"].b[0]) == [2, 3]
    assert isinstance(got["t"], tuple) and got["t"][0] == 1.0
    with pytest.raises(TypeError, match="cannot fetch"):
        sess.run("x:0")


def test_integer_gradients(rng):
    """PYTHON.md: gradients of integer tensors are computed by the same
    rules in the tensors' integer dtype (d sum(p * p) / dp = 2 p, int32),
    except through collectives, which have none for integers."""
    p0 = rng.integers(-50, 50, size=5).astype(np.int32)
    g = rf.Graph()
    with g.as_default():
        p = rf.placeholder(rf.int32, (5,))
        (dp,) = rf.gradients(rf.reduce_sum(p * p), [p])
        assert dp.dtype == np.int32
        with rf.Session(g) as s:
            got = s.run(dp, {p: p0})
        np.testing.assert_array_equal(got, 2 * p0.astype(np.int64))
        xs = []
        for d in range(2):
            with rf.device(f"cpu:{d}"):
                xs.append(rf.constant(p0))
        ys = rf.nccl.all_sum(xs)
        with pytest.raises(errors.InvalidArgumentError,
                           match="No gradient defined for AllReduce of int32"):
            rf.gradients(ys, xs)


def test_op_without_gradient_is_not_found():
    """PYTHON.md: an op with no gradient function (LayerNorm's gradient has
    no gradient of its own) is NotFoundError naming it, as rf_gradients'
    NOT_FOUND (TensorFlow raises LookupError)."""
    g = rf.Graph()
    with g.as_default():
        x = rf.constant(np.ones((2, 4), np.float32))
        gamma = rf.constant(np.ones(4, np.float32))
        y = rf.layer_norm(x, gamma, gamma)
        (dx,) = rf.gradients(rf.reduce_sum(y * y), [x])
        with pytest.raises(
                errors.NotFoundError,
                match="No gradient defined for op '_LayerNormGrad'"):
            rf.gradients(rf.reduce_sum(dx * dx), [x])
