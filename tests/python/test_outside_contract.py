"""What a user of docs/PYTHON.md relies on that once did not hold (found
testing the package from outside): values are never silently wrapped,
truncated or taken from another graph."""

import numpy as np
import pytest

import ringflow as rf
from ringflow import errors


def test_fetch_of_another_graph_is_refused_even_with_a_shared_name():
    """A session runs its own graph: a tensor, target or feed key of another
    graph is NotFoundError, even when a node of that name exists in the
    session's graph (it ran that node instead)."""
    with rf.Graph().as_default() as g:
        mine = rf.placeholder(rf.float32, (), name="y")
        doubled = mine * 2.0
    with rf.Graph().as_default():
        other = rf.constant(7.0, name="y")
        other_op = rf.no_op(name="Mul")
    with rf.Session(g) as sess:
        assert sess.run(doubled, {mine: 1.5}) == 3.0
        with pytest.raises(errors.NotFoundError, match="another graph"):
            sess.run(other, {mine: 1.5})
        with pytest.raises(errors.NotFoundError, match="another graph"):
            sess.run([doubled, other_op], {mine: 1.5})
        with pytest.raises(errors.NotFoundError, match="another graph"):
            sess.run(doubled, {other: 1.5})
        with pytest.raises(errors.NotFoundError, match="another graph"):
            sess.make_callable(other)
        with pytest.raises(errors.NotFoundError, match="another graph"):
            sess.make_callable(doubled, [other])
        # the session stays usable
        assert sess.run(doubled, {mine: 2.0}) == 4.0


@pytest.mark.parametrize("value", [2**63, [1, 2**63], [-1, 2**63 + 5],
                                   -2**63 - 1, [[0], [2**64]]])
def test_python_ints_past_int64_are_refused(value, tmp_path):
    """PYTHON.md: Python ints are int32, int64 past its range; past int64's
    they are a TypeError (2**63 was wrapped to -2**63, [-1, 2**63 + 5]
    became float32)."""
    with pytest.raises(TypeError, match="int64"):
        rf.constant(value)
    with pytest.raises(TypeError, match="int64"):
        rf.checkpoint.save(tmp_path / "x.safetensors", {"x": value})


def test_python_ints_at_the_int64_limits(rng):
    lo, hi = -2**63, 2**63 - 1
    a = rf.constant([lo, hi])
    b = rf.constant([[1, 2**31]])
    c = rf.constant([-2**31, 2**31 - 1])
    with rf.Session() as sess:
        av, bv, cv = sess.run([a, b, c])
    assert a.dtype == rf.int64 and av.tolist() == [lo, hi]
    assert b.dtype == rf.int64 and bv.tolist() == [[1, 2**31]]
    assert c.dtype == rf.int32 and cv.tolist() == [-2**31, 2**31 - 1]


def test_none_is_not_a_dtype():
    """np.dtype(None) is float64; ringflow's dtype arguments refuse None
    (placeholder(None), cast(x, None) made float64 tensors)."""
    with pytest.raises(TypeError, match="None"):
        rf.as_dtype(None)
    with pytest.raises(TypeError):
        rf.placeholder(None, (2,))
    with pytest.raises(TypeError):
        rf.cast(rf.constant([1.0]), None)
    # where None means "the default", it still does
    assert rf.constant(1.5, dtype=None).dtype == rf.float32


def test_python_float_operand_of_an_integer_tensor_is_refused():
    """A Python float meeting an integer tensor becomes a constant of its
    dtype only when it is a whole number; 0.5 was truncated to 0, so
    `int_tensor * 0.5` gave zeros (TensorFlow raises TypeError too)."""
    x = rf.constant([3, 4])
    with pytest.raises(TypeError, match="0.5"):
        x * 0.5
    with pytest.raises(TypeError):
        rf.add(x, [1.0, 2.5])
    with pytest.raises(TypeError):
        rf.where(rf.constant([True, False]), x, 1.5)
    y = x * 2.0  # a whole number is fine
    with rf.Session() as sess:
        assert sess.run(y).tolist() == [6, 8]


def test_argmax_axis_none_is_axis_0():
    """tf.argmax's axis=None means axis 0."""
    x = rf.constant([[1, 5], [3, 4]])
    a = rf.argmax(x, axis=None)
    with rf.Session() as sess:
        assert sess.run(a).tolist() == [1, 0]


def test_dropout_seed_none_is_seed_0():
    """tf.nn.dropout's seed defaults to None: the same as seed=0 here."""
    x = rf.constant(np.ones((8, 8), np.float32))
    a = rf.nn.dropout(x, rate=0.5, seed=None)
    b = rf.nn.dropout(x, rate=0.5)
    with rf.Session() as sess:
        av, bv = sess.run([a, b])
    np.testing.assert_array_equal(av, bv)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_one_hot_axis_counts_in_the_result(axis, rng):
    """PYTHON.md: the new dim is at `axis` of the result (rank r + 1),
    negative from its end; outside [-(r+1), r] InvalidArgumentError."""
    idx = rng.integers(-1, 5, size=(3, 4))
    t = rf.one_hot(rf.constant(idx.astype(np.int32)), 4, on_value=2,
                   off_value=-1, axis=axis, dtype=None)
    assert t.dtype == rf.float32  # dtype None: float32 (was float64)
    ref = np.where(idx[..., None] == np.arange(4), 2.0, -1.0)
    ref = np.moveaxis(ref, -1, axis)
    with rf.Session() as sess:
        np.testing.assert_array_equal(sess.run(t), ref)
    for bad in (3, -4):
        with pytest.raises(errors.InvalidArgumentError, match="axis"):
            rf.one_hot(rf.constant(idx.astype(np.int32)), 4, axis=bad)


def test_nn_max_pool_and_avg_pool_are_tf_names(rng):
    """tf.nn.max_pool / tf.nn.avg_pool (rf.nn has TensorFlow's tf.nn
    names) are the 2-D pools, checked against NumPy."""
    x = rng.standard_normal((2, 4, 6, 3))
    px = rf.placeholder(rf.float64, x.shape)
    mx = rf.nn.max_pool(px, ksize=2, strides=2, padding="VALID")
    av = rf.nn.avg_pool(px, [1, 2, 2, 1], [1, 2, 2, 1], "VALID",
                        data_format=None)
    assert mx.op.type == "MaxPool" and av.op.type == "AvgPool"
    with rf.Session() as sess:
        got_max, got_avg = sess.run([mx, av], {px: x})
    windows = x.reshape(2, 2, 2, 3, 2, 3)
    np.testing.assert_array_equal(got_max, windows.max(axis=(2, 4)))
    np.testing.assert_allclose(got_avg, windows.mean(axis=(2, 4)),
                               rtol=1e-14)


def test_gradients_of_no_xs_or_no_ys():
    """gradients(y, []) is [] and gradients([], xs) one None per x, as in
    TensorFlow (both were InvalidArgumentError showing a C pointer)."""
    x = rf.placeholder(rf.float32, (2,))
    y = rf.reduce_sum(x * x)
    n = len(rf.get_default_graph().get_operations())
    assert rf.gradients(y, []) == []
    assert rf.gradients([y], [], grad_ys=[1.0]) == []
    assert rf.gradients([], [x]) == [None]
    assert len(rf.get_default_graph().get_operations()) == n  # no nodes


def test_dropout_seed_is_an_int64():
    """The seed is the C API's int64: past its range InvalidArgumentError
    naming the seed and the range (2**64 was a bare OverflowError); a float
    is a TypeError, not cut; -2**63 and 2**63 - 1 (negative seeds are keys
    like any other) and NumPy ints are taken."""
    x = rf.constant(np.ones((4, 4), np.float32))
    for bad in (2**64, 2**63, -2**63 - 1):
        with pytest.raises(errors.InvalidArgumentError,
                           match=rf"seed {bad} is out of range.*-2\*\*63"):
            rf.dropout(x, 0.5, seed=bad)
    with pytest.raises(TypeError):
        rf.dropout(x, 0.5, seed=1.5)
    ys = [rf.dropout(x, 0.5, seed=s)
          for s in (-1, -2**63, 2**63 - 1, np.int64(7), 7)]
    with rf.Session() as sess:
        got = sess.run(ys)
    np.testing.assert_array_equal(got[3], got[4])


def test_restore_variables_refuses_what_is_not_a_variable(tmp_path):
    """variables=[an array] was an AttributeError; a TypeError naming it,
    as moving_average_update's, for save_variables too."""
    v = rf.Variable(np.ones(2, np.float32))
    init = rf.global_variables_initializer()
    path = tmp_path / "v.safetensors"
    with rf.Session() as sess:
        sess.run(init)
        rf.checkpoint.save_variables(sess, path)
        for bad in (np.ones(2), v.value()):
            with pytest.raises(TypeError, match="is not a Variable"):
                rf.checkpoint.restore_variables(sess, path, variables=[bad])
            with pytest.raises(TypeError, match="is not a Variable"):
                rf.checkpoint.save_variables(sess, path, variables=[v, bad])
        assert rf.checkpoint.restore_variables(sess, path,
                                               variables=[v]) is None


def test_pad_of_an_integer_tensor_with_a_fraction_is_refused():
    """pad's constant_values follows the operands' rule: a Python float
    that is not a whole number meeting an integer tensor is a TypeError
    (0.5 padded with 0); a whole one is fine."""
    x = rf.constant(np.arange(3, dtype=np.int32))
    with pytest.raises(TypeError, match="0.5"):
        rf.pad(x, [[1, 1]], constant_values=0.5)
    with pytest.raises(TypeError):
        rf.pad(rf.cast(x, rf.int64), [[1, 0]], constant_values=float("nan"))
    y = rf.pad(x, [[1, 1]], constant_values=7.0)
    z = rf.pad(rf.cast(x, rf.float32), [[1, 1]], constant_values=0.5)
    with rf.Session() as sess:
        yv, zv = sess.run([y, z])
    assert yv.tolist() == [7, 0, 1, 2, 7]
    assert zv.tolist() == [0.5, 0, 1, 2, 0.5]


def test_gelu_approximate_is_a_bool():
    """approximate="yes" was taken as true: only bools (NumPy's too)."""
    x = rf.constant(np.linspace(-2, 2, 5).astype(np.float32))
    for bad in ("yes", 1, None, 0.0):
        with pytest.raises(TypeError, match="approximate"):
            rf.gelu(x, approximate=bad)
    a, b = rf.gelu(x, approximate=np.True_), rf.gelu(x, approximate=True)
    with rf.Session() as sess:
        av, bv = sess.run([a, b])
    np.testing.assert_array_equal(av, bv)


def test_flags_are_bools():
    """matmul's transposes, the reductions' keepdims, apply_momentum's
    use_nesterov and batch_norm's training took any value by its truth
    ("no" was True): only bools (NumPy's too), else TypeError naming the
    flag."""
    g = rf.Graph()
    with g.as_default():
        a = rf.constant(np.ones((2, 2), np.float32))
        for bad in ("no", 1, None):
            with pytest.raises(TypeError, match="transpose_a"):
                rf.matmul(a, a, transpose_a=bad)
            with pytest.raises(TypeError, match="keepdims"):
                rf.reduce_sum(a, keepdims=bad)
            with pytest.raises(TypeError, match="keepdims"):
                rf.reduce_mean(a, keepdims=bad)
        v = rf.Variable(np.ones(2, np.float32))
        acc = rf.Variable(np.zeros(2, np.float32))
        with pytest.raises(TypeError, match="use_nesterov"):
            rf.apply_momentum(v, acc, 0.1, np.ones(2, np.float32), 0.9,
                              use_nesterov="yes")
        x = rf.constant(np.ones((4, 3), np.float32))
        with pytest.raises(TypeError, match="training"):
            rf.batch_norm(x, np.ones(3, np.float32), np.zeros(3, np.float32),
                          training="yes")
        y = rf.matmul(a, a, transpose_a=np.True_)
        s = rf.reduce_sum(a, keepdims=np.False_)
    with rf.Session(g) as sess:
        yv, sv = sess.run([y, s])
    np.testing.assert_array_equal(yv, np.full((2, 2), 2, np.float32))
    assert sv == 4
