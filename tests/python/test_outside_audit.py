"""docs/PYTHON.md's promises checked from outside, as a user relies on them
(found auditing the package against its documentation; each test failed
before its fix)."""

import collections

import numpy as np
import pytest

import ringflow as rf
from ringflow import errors

Pair = collections.namedtuple("Pair", "a b")


class Fetches(list):
    """A list subclass: a list of fetches like any other."""


def test_named_tuple_fetches_made_per_run_give_their_own_values():
    """PYTHON.md: fetches may be named tuples, and a run is prepared once per
    request "by identity". A named tuple made for each run (freed after it)
    was found by its id, which the next one takes: half the runs below
    returned the values of the other order."""
    x = rf.placeholder(rf.float32, ())
    y, z = x + 1.0, x + 2.0
    with rf.Session() as sess:
        for i in range(64):
            fetches = Pair(y, z) if i % 2 == 0 else Pair(z, y)
            got = sess.run(fetches, {x: 0.0})
            want = (1.0, 2.0) if i % 2 == 0 else (2.0, 1.0)
            assert isinstance(got, Pair)
            assert (float(got.a), float(got.b)) == want, i
            del fetches, got


def test_list_subclass_fetches():
    """A list subclass of fetches is a list of fetches: it failed with
    "iteration over a 0-d array" (taken for a named tuple), and a changed
    one must give what it holds now."""
    x = rf.placeholder(rf.float32, ())
    y, z = x + 1.0, x + 2.0
    with rf.Session() as sess:
        fetches = Fetches([y])
        got = sess.run(fetches, {x: 1.0})
        assert isinstance(got, Fetches) and [float(v) for v in got] == [2.0]
        fetches.append(z)
        got = sess.run(fetches, {x: 1.0})
        assert [float(v) for v in got] == [2.0, 3.0]
        step = sess.make_callable(Fetches([z, y]), [x])
        assert [float(v) for v in step(0.0)] == [2.0, 1.0]


def test_graph_from_json_errors():
    """PYTHON.md: loading checks everything: InvalidArgumentError naming the
    line and column of malformed JSON, NotFoundError for an op that is not
    registered (GRAPH_FORMAT.md's NOT_FOUND; PYTHON.md said
    InvalidArgumentError)."""
    with pytest.raises(errors.InvalidArgumentError, match="line 1, column"):
        rf.Graph.from_json('{"nodes": [}')
    x = rf.placeholder(rf.float32, (2,), name="x")
    rf.identity(x, name="y")
    text = rf.get_default_graph().to_json()
    assert '"Identity"' in text
    with pytest.raises(errors.NotFoundError, match="unknown op 'Nope'"):
        rf.Graph.from_json(text.replace('"Identity"', '"Nope"'))


@pytest.mark.parametrize("fn, arg", [
    (rf.relu, "features"), (rf.nn.relu, "features"), (rf.sigmoid, "x"),
    (rf.tanh, "x"), (rf.zeros_like, "input"), (rf.ones_like, "input"),
    (rf.reduce_sum, "input_tensor"), (rf.reduce_mean, "input_tensor"),
    (rf.argmax, "input"), (rf.negative, "x"), (rf.softmax, "logits")])
def test_documented_argument_names(fn, arg):
    """PYTHON.md's table gives each op function's argument names (relu(x),
    zeros_like(x), reduce_sum(x, ...) were not the functions' names:
    relu(x=t) was a TypeError); the names are TensorFlow's."""
    t = rf.constant(np.array([[1.0, -2.0]], np.float32))
    out = fn(**{arg: t})
    assert isinstance(out, rf.Tensor)


def test_from_dlpack_of_numpy_arrays():
    """PYTHON.md: from_dlpack takes host memory of any producer, a NumPy
    array included, without a copy, bfloat16 too (a NumPy bfloat16 array
    was a BufferError: NumPy's own __dlpack__ refuses it); a dtype ringflow
    lacks is a TypeError (the docstring's promise: complex64 came back as a
    complex64 array)."""
    import ml_dtypes
    a = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    got = rf.from_dlpack(a)
    assert got.dtype == rf.bfloat16 and np.shares_memory(got, a)
    np.testing.assert_array_equal(got.astype(np.float64), [0, 1, 2, 3])
    b = np.arange(6, dtype=np.int64).reshape(2, 3)
    got = rf.from_dlpack(b)
    assert got.dtype == rf.int64 and np.shares_memory(got, b)
    for dtype in (np.complex64, np.uint16, np.int16):
        with pytest.raises(TypeError):
            rf.from_dlpack(np.ones(2, dtype))
    x = rf.placeholder(rf.bfloat16, (4,))
    y = rf.cast(x, rf.float64) * 2.0
    with rf.Session() as sess:
        np.testing.assert_array_equal(sess.run(y, {x: rf.from_dlpack(a)}),
                                      [0, 2, 4, 6])


def test_variable_shape_must_fit_the_initial_value():
    """PYTHON.md: `shape` may relax the initial value's shape (None for
    unknown dims). A shape that does not fit it, (2,) for 3 elements, was
    taken: the initializer (and so global_variables_initializer(), for
    every variable) failed at run time. Now InvalidArgumentError at once,
    adding nothing."""
    g = rf.get_default_graph()
    ok = rf.Variable(np.ones((2, 3), np.float32), shape=(None, 3))
    cases = [(np.ones(3), (2,)), (np.ones((2, 3)), (3, None)),
             (np.ones((2, 3)), (None,)), ([1.0, 2.0], (2, 1)),
             (rf.constant(np.ones((4, 2))), (4, 3)), (ok, (None, 2))]
    before = len(g.get_operations())
    for value, shape in cases:
        with pytest.raises(errors.InvalidArgumentError, match="shape"):
            rf.Variable(value, shape=shape)
        assert len(g.get_operations()) == before
    fits = rf.Variable(rf.constant(np.ones((4, 2))), shape=(None, None))
    assert fits.shape == (None, None)
    init = rf.global_variables_initializer()
    with rf.Session() as sess:
        sess.run(init)
        assert sess.run(ok).shape == (2, 3)
        assert sess.run(fits).shape == (4, 2)


def _index_calls(bad):
    """Each op function's index arguments (axes, dims, sizes, counts,
    windows) given `bad`."""
    x = rf.constant(np.ones((2, 3), np.float32))
    x4 = rf.constant(np.ones((1, 4, 4, 1), np.float32))
    f4 = rf.constant(np.ones((2, 2, 1, 1), np.float32))
    i = rf.constant([0, 1])
    x1 = rf.constant(np.ones((2, 1), np.float32))
    return {
        "reduce_sum": lambda: rf.reduce_sum(x, bad),
        "reduce_mean": lambda: rf.reduce_mean(x, [0, bad]),
        "argmax": lambda: rf.argmax(x, bad),
        "softmax": lambda: rf.softmax(x, axis=bad),
        "reshape": lambda: rf.reshape(x, [bad, -1]),
        "placeholder": lambda: rf.placeholder(rf.float32, (bad, 2)),
        "transpose": lambda: rf.transpose(x, [bad, 0]),
        "concat": lambda: rf.concat([x, x], bad),
        "split": lambda: rf.split(x, bad, axis=1),
        "split axis": lambda: rf.split(x, 3, axis=bad),
        "split sizes": lambda: rf.split(x, [bad, -1], axis=1),
        "slice": lambda: rf.slice(x, [bad, 0], [1, 1]),
        "strided_slice": lambda: rf.strided_slice(x, [0], [bad]),
        "strided_slice mask": lambda: rf.strided_slice(x, [0], [1],
                                                       end_mask=bad),
        "expand_dims": lambda: rf.expand_dims(x, bad),
        "squeeze": lambda: rf.squeeze(x1, bad),
        "pad": lambda: rf.pad(x, [[bad, 1], [0, 0]]),
        "tile": lambda: rf.tile(x, [bad, 1]),
        "gather": lambda: rf.gather(x, i, axis=bad),
        "one_hot depth": lambda: rf.one_hot(i, bad),
        "one_hot axis": lambda: rf.one_hot(i, 3, axis=bad),
        "conv2d": lambda: rf.nn.conv2d(x4, f4, bad, "SAME"),
        "max_pool2d": lambda: rf.nn.max_pool2d(x4, [bad, 2], 1, "SAME"),
    }


@pytest.mark.parametrize("call", sorted(_index_calls(0)))
def test_index_arguments_are_ints_never_cut(call):
    """PYTHON.md: the index arguments are Python ints fixed when the node
    is built. A float was cut silently: reduce_sum(x, 1.5) summed axis 1,
    reshape(x, [3.5, 2]) made (3, 2), placeholder(dtype, (2.5,)) a (2,)
    and one_hot(i, 3.7) depth 3. Now a TypeError naming the argument, as
    the session's counts and dropout's seed; past int64 an
    InvalidArgumentError naming it (it was an OverflowError). NumPy ints
    are ints."""
    g = rf.get_default_graph()
    for bad in (1.5, 1.0, "1", np.float64(1.0)):
        calls = _index_calls(bad)
        before = len(g.get_operations())
        with pytest.raises(TypeError, match="must be an int"):
            calls[call]()
        assert len(g.get_operations()) == before
    calls = _index_calls(2**63)
    before = len(g.get_operations())
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        calls[call]()
    assert len(g.get_operations()) == before
    calls = _index_calls(np.int64(1))
    out = calls[call]()
    assert isinstance(out, (rf.Tensor, list))


def test_index_arguments_of_numpy_ints_build_what_ints_do(rng):
    x = rf.placeholder(rf.float64, (2, 3, 4))
    value = rng.standard_normal((2, 3, 4))
    outs = [rf.reduce_sum(x, np.array([0, -1])),
            rf.transpose(x, np.array([2, 0, 1])),
            rf.reshape(x, np.array([4, -1])),
            rf.tile(x, (np.int32(1), 2, np.int64(1))),
            rf.pad(x, np.array([[0, 1], [1, 0], [0, 0]])),
            rf.squeeze(rf.expand_dims(x, np.int8(-1)), [np.int64(3)])]
    want = [value.sum((0, -1)), value.transpose(2, 0, 1),
            value.reshape(4, -1), np.tile(value, (1, 2, 1)),
            np.pad(value, [[0, 1], [1, 0], [0, 0]]), value]
    with rf.Session() as sess:
        got = sess.run(outs, {x: value})
    for g_, w in zip(got, want):
        np.testing.assert_allclose(g_, w, rtol=1e-12, atol=1e-12)
        assert g_.shape == w.shape


@pytest.mark.parametrize("reduction", [True, False, 1.0, np.float64(0.0),
                                       np.True_, "SUM", "mean", None])
def test_reduction_is_a_name(reduction):
    """PYTHON.md: reduction is "sum", "prod", "min", "max" or "avg", another
    value a ValueError. True and 1.0 equal the C enum's RF_REDUCE_PROD, and
    were taken as "prod" (False and 0.0 as "sum")."""
    xs = []
    for d in range(2):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(rf.float32, (2,)))
    with pytest.raises(ValueError, match="reduction"):
        rf.collectives.all_reduce(xs, reduction)
    with pytest.raises(ValueError, match="reduction"):
        rf.collectives.reduce(xs, reduction)
    with pytest.raises(ValueError, match="reduction"):
        rf.collectives.reduce_scatter(xs, reduction)


def test_node_name_of_build_and_load_errors():
    """PYTHON.md: .node_name is the first node the message names. A name
    already used ("node name 'a' is already used") and a graph file's
    node ("graph file, node 0 'x': unknown op") gave None."""
    rf.constant(1.0, name="a")
    with pytest.raises(errors.AlreadyExistsError, match="'a'") as e:
        rf.constant(2.0, name="a")
    assert e.value.node_name == "a"
    rf.identity(rf.placeholder(rf.float32, (2,), name="x"), name="y")
    text = rf.get_default_graph().to_json().replace('"Identity"', '"Nope"')
    with pytest.raises(errors.NotFoundError, match="'y'") as e:
        rf.Graph.from_json(text)
    assert e.value.node_name == "y"
    with pytest.raises(errors.InvalidArgumentError) as e:
        rf.add(rf.constant([1.0], name="p"), rf.constant([1], name="q"),
               name="s")
    assert e.value.node_name == "s"


@pytest.mark.parametrize("value", [None, "2.5", "False", b"7", [1.0, None],
                                   ["1", "2"], {}])
def test_python_values_that_are_not_numbers_are_refused(value):
    """PYTHON.md: constant raises TypeError for values that are not numbers,
    arrays or bools, and an operand becomes a constant of the tensor's
    dtype. With a dtype, NumPy's conversion read None as NaN and strings as
    numbers: constant(None, float32) was NaN, x + None added NaN, x * "3"
    tripled x and constant("False", bool) was True."""
    x = rf.constant([1.0, 2.0])
    with pytest.raises(TypeError):
        rf.constant(value, rf.float32)
    with pytest.raises(TypeError):
        rf.constant(value, rf.bool)
    with pytest.raises(TypeError):
        x + value
    with pytest.raises(TypeError):
        value * x
    v = rf.Variable([1.0, 2.0])
    with pytest.raises(TypeError):
        rf.apply_gradient_descent(v, value, [1.0, 1.0])


def test_python_numbers_with_a_dtype_still_convert():
    a = rf.constant([1, 2.5, True], rf.float64)
    b = rf.constant(2**70, rf.float32)
    c = rf.constant([[1, 2], [3, 4]], rf.int8)
    d = rf.constant([], rf.float32)
    e = rf.constant([1.0, 2.0]) + 2**40
    with rf.Session() as sess:
        av, bv, cv, dv, ev = sess.run([a, b, c, d, e])
    assert av.tolist() == [1.0, 2.5, 1.0]
    assert bv == np.float32(2**70)
    assert cv.dtype == np.int8 and cv.tolist() == [[1, 2], [3, 4]]
    assert dv.shape == (0,) and dv.dtype == np.float32
    assert ev.tolist() == [np.float32(2**40 + 1), np.float32(2**40 + 2)]


def test_matmul_operator_operands_take_the_tensor_dtype(rng):
    """PYTHON.md: for the operators (@ among them) a Python or NumPy operand
    becomes a constant of the tensor's dtype. For @ it kept its own:
    float64_tensor @ [[1.0], [2.0]] was an InvalidArgumentError (float32
    operand), and so were np.ones((2, 2)) @ float32_tensor and
    int64_tensor @ [[1], [2]]."""
    a = rng.standard_normal((3, 2))
    m = rng.standard_normal((2, 2))
    t64 = rf.placeholder(rf.float64, (3, 2))
    t32 = rf.placeholder(rf.float32, (2, 2))
    ti = rf.placeholder(rf.int64, (2, 2))
    outs = [t64 @ [[1.0], [2.0]], [[1.0, 2.0, 3.0]] @ t64, m @ t32,
            t32 @ m, ti @ [[1], [2]], rf.matmul(t64, m.tolist())]
    assert [o.dtype for o in outs] == [rf.float64, rf.float64, rf.float32,
                                      rf.float32, rf.int64, rf.float64]
    with pytest.raises(TypeError, match="0.5"):
        ti @ [[0.5], [1.0]]
    m32 = m.astype(np.float32)
    iv = np.array([[2**40, -3], [5, 7]])
    with rf.Session() as sess:
        got = sess.run(outs, {t64: a, t32: m32, ti: iv})
    m32_64 = m32.astype(np.float64)
    want = [a @ [[1.0], [2.0]], [[1.0, 2.0, 3.0]] @ a, m32_64 @ m32_64,
            m32_64 @ m32_64, iv @ [[1], [2]], a @ m]
    # float32 products: within float32 rounding of their terms' size (a sum
    # that cancels to near 0 is off by far more than 1e-6 of itself)
    terms32 = float(np.max(np.abs(m32_64) @ np.abs(m32_64)))
    for g_, w in zip(got, want):
        atol = 1e-6 * terms32 if g_.dtype == np.float32 else 0
        np.testing.assert_allclose(g_, w, rtol=1e-6, atol=atol)
    assert got[4].tolist() == (iv @ np.array([[1], [2]])).tolist()


def test_every_readme_op_is_reachable_from_python():
    """Issue 17 item 8: every op of the README's op list can be built by a
    documented Python function (one graph with one node of each)."""
    import test_docs_ops
    x = rf.placeholder(rf.float32, (2, 4, 4, 3), name="x")
    f = rf.constant(np.ones((2, 2, 3, 5), np.float32))
    y = rf.nn.conv2d(x, f, 1, "SAME")
    rf.nn.conv2d_backprop_input([2, 4, 4, 3], f, y, 1, "SAME")
    rf.nn.conv2d_backprop_filter(x, [2, 2, 3, 5], y, 1, "SAME")
    m = rf.nn.max_pool2d(x, 2, 2, "VALID")
    rf.nn.max_pool_grad(x, m, m, 2, 2, "VALID")
    a = rf.nn.avg_pool2d(x, 2, 2, "VALID")
    rf.nn.avg_pool_grad([2, 4, 4, 3], a, 2, 2, "VALID")
    v = rf.Variable(np.ones((3, 2), np.float32))
    mv, vv = (rf.Variable(np.zeros((3, 2), np.float32)) for _ in range(2))
    m1 = rf.Variable(np.zeros(2, np.float32))
    v1 = rf.Variable(np.ones(2, np.float32))
    m2 = rf.matmul([[1.0, 2.0, 3.0]], v)
    rf.matmul(rf.reshape(x, [2, 16, 3]), rf.reshape(v, [1, 3, 2]))
    rf.apply_adam(v, mv, vv, 0.9, 0.99, 0.1, 0.9, 0.99, 1e-8, v)
    rf.apply_adamw(v, mv, vv, 0.9, 0.99, 0.1, 0.9, 0.99, 1e-8, 0.1, v)
    rf.apply_gradient_descent(v, 0.1, v)
    rf.apply_momentum(v, mv, 0.1, v, 0.9)
    rf.assign_mul(v, np.ones((3, 2), np.float32))
    rf.batch_norm(m2, [1.0, 1.0], [0.0, 0.0])
    rf.batch_norm(m2, [1.0, 1.0], [0.0, 0.0], m1, v1, training=False)
    b = rf.bias_add(m2, [1.0, 2.0])
    c = rf.cast(b, rf.int32)
    rf.concat([b, b], 0)
    rf.add_n([b, b]) / (b - b) * -b
    rf.dropout(b, 0.5)
    rf.gelu(b)
    rf.layer_norm(b, [1.0, 1.0], [0.0, 0.0])
    rf.where(rf.equal(c, c), b, b)
    rf.fill(rf.shape(b), 1.0)
    rf.gather(b, [0])
    rf.one_hot(c, 3)
    rf.ones_like(b) + rf.zeros_like(b)
    rf.pad(b, [[1, 1], [0, 0]])
    rf.identity(b)
    rf.relu(b) + rf.sigmoid(b) + rf.tanh(b) + rf.softmax(b)
    rf.reduce_sum(b) + rf.reduce_mean(b) + rf.cast(rf.argmax(b), rf.float32)
    rf.slice(b, [0, 0], [1, 1])
    rf.strided_slice(b, [0], [1])
    rf.split(b, 2, axis=1)
    rf.squeeze(rf.expand_dims(b, 0))
    rf.tile(b, [1, 2])
    rf.transpose(b)
    rf.sparse_softmax_cross_entropy_with_logits(labels=[0], logits=b)
    rf.no_op()
    built = {op.type for op in rf.get_default_graph().get_operations()}
    readme = [w for w in test_docs_ops.readme_op_words()
              if test_docs_ops.is_op(w)]
    assert len(readme) >= 55
    assert sorted(set(readme) - built) == []


def test_feeding_a_variable_handle_is_a_type_error_saying_so():
    """PYTHON.md: TypeError for a feed key of another kind. A variable's
    handle as a feed key was TypeError "Runner: dtypes must be np.dtype",
    the extension's internals; now it says what is wrong, as fetching a
    handle does."""
    v = rf.Variable(np.ones(2))
    x = rf.placeholder(rf.float64, (2,))
    y = x + v
    with rf.Session() as sess:
        sess.run(v.initializer)
        with pytest.raises(TypeError, match="cannot feed .*resource"):
            sess.run(y, {x: [1.0, 2.0], v.handle: [3.0, 3.0]})
        with pytest.raises(TypeError, match="cannot feed .*resource"):
            sess.make_callable(y, [x, v.handle])
        with pytest.raises(TypeError, match="cannot fetch .*resource"):
            sess.run(v.handle)
        assert sess.run(y, {x: [1.0, 2.0]}).tolist() == [2.0, 3.0]


def _number_calls(bad):
    x = rf.constant(np.ones((4, 3), np.float32))
    one, zero = np.ones(3, np.float32), np.zeros(3, np.float32)
    v = rf.Variable(zero)
    xs = []
    for d in range(2):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.constant(np.ones((4, 3), np.float32)))
    return {
        "dropout rate": lambda: rf.dropout(x, bad),
        "layer_norm epsilon": lambda: rf.layer_norm(x, one, zero,
                                                    epsilon=bad),
        "batch_norm momentum": lambda: rf.batch_norm(x, one, zero,
                                                     momentum=bad),
        "batch_norm epsilon": lambda: rf.batch_norm(x, one, zero,
                                                    epsilon=bad),
        "sync_batch_norm epsilon": lambda: rf.sync_batch_norm(
            xs, [one, one], [zero, zero], epsilon=bad),
        "moving_average_update": lambda: rf.moving_average_update(
            v, one, bad),
        "one_hot on_value": lambda: rf.one_hot([1], 3, on_value=bad),
        "one_hot off_value": lambda: rf.one_hot([1], 3, off_value=bad),
        "pad": lambda: rf.pad(x, [[1, 1], [0, 0]], constant_values=bad),
    }


@pytest.mark.parametrize("call", sorted(_number_calls(0.5)))
def test_number_arguments_are_numbers(call):
    """A rate, epsilon, momentum or fill value given as a string was read
    by float(): dropout(x, "0.5"), pad(..., constant_values="7") built
    nodes. They are numbers (NumPy's too): a str is a TypeError naming the
    argument, as None and complex numbers were."""
    g = rf.get_default_graph()
    for bad in ("0.5", b"0", None, 0.5j):
        calls = _number_calls(bad)
        before = len(g.get_operations())
        with pytest.raises(TypeError):
            calls[call]()
        assert len(g.get_operations()) == before
    for good in (0.5, np.float32(0.5), np.array(0.5)):
        _number_calls(good)[call]()


def test_graph_from_json_takes_the_bytes_of_a_file(tmp_path):
    """from_json(s): the text of a graph file, also as the bytes read from
    it (bytes were an AttributeError: 'bytes' object has no attribute
    'encode'); another type is a TypeError."""
    x = rf.placeholder(rf.float32, (2,), name="x")
    rf.multiply(x, 2.0, name="y")
    path = tmp_path / "g.json"
    path.write_text(rf.get_default_graph().to_json())
    g = rf.Graph.from_json(path.read_bytes())
    with rf.Session(g) as sess:
        got = sess.run(g.get_tensor_by_name("y:0"),
                       {g.get_tensor_by_name("x"): [1.0, 2.0]})
    assert got.tolist() == [2.0, 4.0]
    with pytest.raises(TypeError, match="str or bytes"):
        rf.Graph.from_json(None)


@pytest.mark.parametrize("value", [3, 1.5, None, "x", np.ones(2)])
def test_group_takes_ops_and_tensors(value):
    """PYTHON.md: group(*ops) runs after every given op (or tensor's op). A
    Python value or array was made a Const and grouped (rf.group(3) built
    a node); now a TypeError, adding nothing."""
    x = rf.constant(1.0)
    g = rf.get_default_graph()
    before = len(g.get_operations())
    with pytest.raises(TypeError, match="group"):
        rf.group(x, value)
    assert len(g.get_operations()) == before
    v = rf.Variable(2.0)
    grp = rf.group(x, x.op, v, v.initializer)
    assert {op.name for op in grp.control_inputs} >= {x.op.name,
                                                      v.initializer.name}
