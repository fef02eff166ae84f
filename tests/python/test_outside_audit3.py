"""docs/PYTHON.md's promises checked from outside, third round: the
ringflow.nccl module, errors naming nodes, fetch structures, default graph
stacks and the graph arguments of the API (each test of a defect failed
before its fix; the last ones pin what PYTHON.md now says)."""

import collections

import numpy as np
import pytest

import ringflow as rf
from ringflow import errors, framework


def _inputs(n):
    xs = []
    for d in range(n):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(rf.float32, (2,), name=f"x{d}"))
    return xs


@pytest.mark.parametrize("reduce", [
    lambda xs, name: rf.nccl.reduce_sum(xs, name=name),
    lambda xs, name: rf.collectives.reduce(xs, "max", name=name),
])
def test_a_refused_unnamed_reduce_names_no_node(reduce):
    """PYTHON.md: `.node_name` is the node the message names, None when it
    names none. A reduce on a device none of its inputs is on, with no
    name, was refused with "node '(unnamed)' is on cpu:2", and node_name
    was "(unnamed)", which no node is (or can be) named; the message now
    quotes no node ("the Reduce is on cpu:2")."""
    xs = _inputs(3)
    with rf.device("cpu:2"):
        with pytest.raises(errors.InvalidArgumentError,
                           match="No input tensor uses the same device") as e:
            reduce(xs[:2], None)
    assert e.value.node_name is None
    with rf.device("cpu:2"):
        with pytest.raises(errors.InvalidArgumentError) as e:
            reduce(xs[:2], "red")
    assert e.value.node_name == "red"  # a name given is still the name


def test_defaultdict_fetches():
    """PYTHON.md: fetches are lists, tuples and dicts of tensors, nested
    freely, and the result has the same structure. A collections.defaultdict
    (a dict) ran the step, then raised "TypeError: first argument must be
    callable or None" building the result (TensorFlow gives a defaultdict of
    the same default factory)."""
    x = rf.placeholder(rf.float32, (2,), name="x")
    y = x * 2.0
    v = rf.Variable(np.zeros(2, np.float32))
    step = v.assign(x)
    fetches = collections.defaultdict(list)
    fetches["y"] = y
    fetches["step"] = step
    nested = {"inner": fetches, "list": [y]}
    with rf.Session() as sess:
        sess.run(v.initializer)
        for _ in range(2):  # prepared, then again
            got = sess.run(fetches, {x: [1.0, 2.0]})
            assert type(got) is collections.defaultdict
            assert got.default_factory is list
            assert list(got) == ["y", "step"]
            np.testing.assert_array_equal(got["y"], [2.0, 4.0])
            assert got["step"] is None
            assert got["missing"] == []  # its factory, as the fetched one's
        got = sess.run(nested, {x: [3.0, 4.0]})
        assert type(got["inner"]) is collections.defaultdict
        np.testing.assert_array_equal(got["inner"]["y"], [6.0, 8.0])
        got = sess.make_callable(fetches, [x])([5.0, 6.0])
        assert type(got) is collections.defaultdict
        np.testing.assert_array_equal(got["y"], [10.0, 12.0])
        np.testing.assert_array_equal(sess.run(v), [5.0, 6.0])


def test_as_default_blocks_left_out_of_order():
    """PYTHON.md: the default graph is the innermost `Graph.as_default()`
    of the thread. A block left before one entered after it (generators
    interleaving their blocks) popped the other block's graph, leaving
    the exited graph the default: ops went to a graph whose block was
    over."""
    g1, g2 = rf.Graph(), rf.Graph()
    outer = rf.get_default_graph()
    c1, c2 = g1.as_default(), g2.as_default()
    c1.__enter__()
    c2.__enter__()
    c1.__exit__(None, None, None)
    try:
        assert rf.get_default_graph() is g2
        assert rf.constant(1.0).graph is g2
    finally:
        c2.__exit__(None, None, None)
    try:
        assert rf.get_default_graph() is outer
    finally:  # the next tests' default graph, whatever happened here
        stack = framework._stack()
        stack[:] = [g for g in stack if g is not g1 and g is not g2]
    # nested blocks of one graph still leave it the default until the last
    with g1.as_default():
        with g1.as_default():
            pass
        assert rf.get_default_graph() is g1
    assert rf.get_default_graph() is outer


@pytest.mark.parametrize("call", [
    lambda g: rf.Session(g),
    lambda g: rf.lower(g),
    lambda g: rf.global_variables(g),
    lambda g: rf.global_variables_initializer(g),
    lambda g: rf.convert_to_tensor(1.0, graph=g),
])
@pytest.mark.parametrize("graph", ["g", 0])
def test_a_graph_argument_that_is_not_a_graph_is_a_type_error(call, graph):
    """A `graph` argument (Session, lower, global_variables,
    global_variables_initializer, convert_to_tensor) that is not a Graph
    or None raised AttributeError ("'str' object has no attribute
    '_lock'") from inside the package: a TypeError naming the call."""
    with pytest.raises(TypeError, match="graph must be a ringflow.Graph"):
        call(graph)
    with rf.Graph().as_default() as g:
        rf.Variable(1.0)
        call(g)  # a Graph still works


# ---- what PYTHON.md now says, pinned ----

def test_fetched_arrays_and_dlpack():
    """Fetched arrays export DLPack (read-only, np.from_dlpack takes them)
    without a copy, except bfloat16 ones, which NumPy's DLPack lacks: their
    uint16 view does, and rf.from_dlpack takes the array itself."""
    x = rf.placeholder(rf.bfloat16, (2,))
    h = rf.placeholder(rf.float16, (2,))
    b = rf.placeholder(rf.bool, (2,))
    ys = [rf.identity(x), rf.identity(h), rf.identity(b)]
    with rf.Session() as sess:
        got_x, got_h, got_b = sess.run(
            ys, {x: [1.0, 2.5], h: [1.0, 2.5], b: [True, False]})
    for got in (got_h, got_b):
        back = np.from_dlpack(got)
        assert back.ctypes.data == got.ctypes.data
        np.testing.assert_array_equal(back, got)
    with pytest.raises(BufferError):
        got_x.__dlpack__()
    bits = np.from_dlpack(got_x.view(np.uint16))
    assert bits.ctypes.data == got_x.ctypes.data
    np.testing.assert_array_equal(bits.view(rf.bfloat16), got_x)
    assert rf.from_dlpack(got_x).ctypes.data == got_x.ctypes.data


def test_python_numbers_past_an_integer_dtype_are_overflow_errors():
    """constant with an integer dtype, and an operand meeting an integer
    tensor: a Python number past the dtype's range is NumPy's
    OverflowError (never wrapped); arrays convert as astype."""
    i = rf.placeholder(rf.int32, (2,))
    for call in (lambda: rf.constant(300, dtype=rf.uint8),
                 lambda: rf.constant(-1, dtype="uint8"),
                 lambda: rf.constant(2.0**31, dtype=rf.int32),
                 lambda: i + 2**40):
        with pytest.raises(OverflowError):
            call()
    assert rf.constant(np.array([2**40]), dtype=rf.int32).dtype == rf.int32
    with pytest.raises(ValueError):
        rf.constant([1.0, 2.0, 3.0], shape=(2, 2))
