"""docs/PYTHON.md's promises checked from outside, fourth round: a
differential fuzz of the op functions against NumPy found these (each test
of a defect failed before its fix; the last ones pin what PYTHON.md now
says)."""

import numpy as np
import pytest

import ringflow as rf


@pytest.mark.parametrize("paddings", [[], (), np.zeros((0, 2), np.int64)])
def test_pad_of_a_rank_0_tensor_takes_no_pairs(paddings):
    # "paddings [[before, after], ...] one pair per dim": none for rank 0
    # (as tf.pad of a scalar); [] was refused with a ValueError.
    with rf.Graph().as_default() as g:
        x = rf.placeholder(rf.float32, ())
        y = rf.pad(x, paddings, constant_values=7)
        assert y.shape == ()
        with rf.Session(g) as sess:
            assert sess.run(y, {x: 3.0}) == 3.0


def test_pad_still_refuses_paddings_of_the_wrong_count():
    with rf.Graph().as_default():
        x = rf.placeholder(rf.float32, (2,))
        with pytest.raises(rf.errors.InvalidArgumentError):
            rf.pad(x, [])
        with pytest.raises(ValueError):
            rf.pad(x, [1, 2, 3])


def test_pad_constant_values_pass_through_a_c_double():
    # As PYTHON.md now says (like one_hot's on/off values): an int64
    # constant past 2**53 rounds; one within it is exact.
    big = 2 ** 62 + 1
    with rf.Graph().as_default() as g:
        x = rf.constant(np.zeros((1,), np.int64))
        exact = rf.pad(x, [[1, 0]], constant_values=2 ** 53 - 1)
        rounded = rf.pad(x, [[1, 0]], constant_values=big)
        with rf.Session(g) as sess:
            e, r = sess.run([exact, rounded])
    assert e[0] == 2 ** 53 - 1
    assert r[0] == int(float(big))


def test_a_node_without_a_device_follows_an_input_with_one():
    # PYTHON.md: a node without a device runs where its first input with a
    # device of its own is, and a Python operand's Const (none of its own)
    # joins its consumers: 2 * x and x * 2 both run on x's device.
    with rf.Graph().as_default() as g:
        with rf.device("cpu:1"):
            x = rf.placeholder(rf.float32, (3,))
        right = x * 2.0
        left = 2.0 * x
        low = rf.lower(g, cpu_devices=2)
    assert low.get_operation_by_name(right.op.name).device == "cpu:1"
    assert low.get_operation_by_name(left.op.name).device == "cpu:1"
    for op in (left, right):
        const = op.op.inputs[0 if op is left else 1].op
        assert low.get_operation_by_name(const.name).device == "cpu:1"
