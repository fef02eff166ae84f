"""ringflow.errors: one OpError subclass per status code of the C library,
each raised with .code, .message and .node_name; a session stays usable
after any error."""

import re

import numpy as np
import pytest

import ringflow as rf
from ringflow import errors
from ringflow._lib import lib, text


def test_one_class_per_code():
    """Every rf_code but OK (read from the C table) has its class, named
    after it, with the same code number (TensorFlow's)."""
    for code in range(1, lib.RF_CODE_COUNT):
        name = text(lib.rf_code_name(code))
        cls_name = "".join(w.capitalize() for w in name.split("_")) + "Error"
        cls = getattr(errors, cls_name)
        assert issubclass(cls, errors.OpError) and cls.code == code
        assert errors.exception_type_from_error_code(code) is cls
        assert getattr(errors, name) == code
    assert errors.OK == 0 and errors.INVALID_ARGUMENT == 3
    assert issubclass(errors.InvalidArgumentError, ValueError)
    e = errors.NotFoundError("node 'x' is missing")
    assert (e.code, e.error_code, e.message, str(e)) == (
        errors.NOT_FOUND, errors.NOT_FOUND, "node 'x' is missing",
        "node 'x' is missing")


def test_run_time_error_names_node_and_device():
    with rf.device("cpu:1"):
        x = rf.placeholder(rf.int32, (2,), name="x")
        q = rf.divide(np.int32(7), x, name="quotient")
    with rf.Session(cpu_devices=2) as sess:
        with pytest.raises(errors.InvalidArgumentError) as e:
            sess.run(q, {x: np.array([1, 0], np.int32)})
        assert e.value.code == errors.INVALID_ARGUMENT
        assert e.value.node_name == "quotient"
        assert "cpu:1" in e.value.message and "Div" in e.value.message
        # Usable afterwards.
        np.testing.assert_array_equal(
            sess.run(q, {x: np.array([2, -3], np.int32)}), [3, -2])


def test_fed_value_of_the_wrong_shape():
    x = rf.placeholder(rf.float32, (2, 3), name="x")
    y = rf.identity(x)
    with rf.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError,
                           match=re.escape("shape (3) is not")) as e:
            sess.run(y, {x: np.zeros(3, np.float32)})
        assert e.value.node_name == "x"
        assert sess.run(y, {x: np.ones((2, 3))}).sum() == 6


def test_uninitialised_variable_then_usable():
    v = rf.Variable(np.float32(4), name="counter")
    init = v.initializer
    with rf.Session() as sess:
        with pytest.raises(errors.FailedPreconditionError) as e:
            sess.run(v)
        assert e.value.node_name is not None and "counter" in e.value.message
        sess.run(init)
        assert sess.run(v) == 4


def test_one_fetched_participant_runs_its_group():
    """Fetching one result of an all-reduce runs every participant (pruning
    keeps whole groups), where the reference hangs."""
    xs = []
    for d in range(3):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(rf.float32, (2,)))
    sums = rf.collectives.all_reduce(xs, name="group")
    feeds = {x: np.full(2, i + 1, np.float32) for i, x in enumerate(xs)}
    with rf.Session(cpu_devices=3, timeout=5) as sess:
        np.testing.assert_array_equal(sess.run(sums[1], feeds), [6, 6])


def test_node_not_in_session():
    x = rf.constant(1.0)
    with rf.Session() as sess:
        with rf.Graph().as_default():
            other = rf.constant(2.0, name="elsewhere")
        with pytest.raises(errors.NotFoundError, match="'elsewhere'") as e:
            sess.run(other)
        assert e.value.node_name == "elsewhere"
        assert sess.run(x) == 1.0


def test_device_the_session_lacks():
    with rf.device("cpu:3"):
        rf.constant(1.0, name="far")
    with pytest.raises(errors.InvalidArgumentError,
                       match="requests device cpu:3") as e:
        rf.Session(cpu_devices=2)
    assert e.value.node_name == "far"


def test_out_of_memory_then_usable():
    """Allocation failures (the C library's fault injection) are
    ResourceExhaustedError, and the session runs again afterwards."""
    x = rf.placeholder(rf.float32, (64,))
    y = x * 2.0 + 1.0
    with rf.Session() as sess:
        value = np.ones(64, np.float32)
        failed = 0
        for k in range(1, 50):
            lib.rf_debug_fail_allocation_after(k)
            try:
                sess.run(y, {x: value})
            except errors.ResourceExhaustedError as e:
                assert e.code == errors.RESOURCE_EXHAUSTED
                failed += 1
                continue
            finally:
                lib.rf_debug_fail_allocation_after(0)
            break
        assert failed > 0
        np.testing.assert_array_equal(sess.run(y, {x: value}), 3.0)


def test_closed_session():
    sess = rf.Session(rf.Graph())
    sess.close()
    sess.close()
    with pytest.raises(RuntimeError, match="closed"):
        sess.run([])
