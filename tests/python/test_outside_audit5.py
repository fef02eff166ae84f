"""docs/PYTHON.md's promises checked from outside, fifth round: names of
collectives, count arguments and constant shapes (each test failed before
its fix)."""

import pytest

import ringflow as rf


def _two_inputs():
    with rf.device("cpu:0"):
        x = rf.placeholder(rf.float32, (2,), name="x")
    with rf.device("cpu:1"):
        y = rf.placeholder(rf.float32, (2,), name="y")
    return x, y


@pytest.mark.parametrize("build", [
    lambda t, n: rf.nccl.all_sum(t, name=n),
    lambda t, n: rf.collectives.all_gather(t, name=n),
    lambda t, n: rf.collectives.reduce_scatter(t, name=n),
])
def test_an_empty_collective_name_is_refused(build):
    # "" was taken: participants "_0", "_1" and a gradient "#grad1", and a
    # second such call failed as AlreadyExistsError on node '_0'.
    with rf.Graph().as_default() as g:
        t = _two_inputs()
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="must not be empty") as e:
            build(t, "")
        assert e.value.node_name is None
        assert len(g.get_operations()) == 2
        build(t, None)  # the graph is still usable; None generates a name


def test_a_collective_name_with_the_reserved_character_names_it():
    # Was "node name 'a#b_0' (AllReduce) is not valid", node_name 'a#b_0'.
    with rf.Graph().as_default():
        t = _two_inputs()
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="'a#b': the name is not valid: it holds "
                                 "'#', which is reserved") as e:
            rf.nccl.all_sum(t, name="a#b")
        assert e.value.node_name is None


@pytest.mark.parametrize("option, field", [
    ("cpu_devices", "num_cpu_devices"), ("threads", "num_threads"),
    ("bucket_bytes", "collective_bucket_bytes")])
def test_a_float_count_option_is_named(option, field):
    with rf.Graph().as_default() as g:
        rf.constant(1.0)
    with pytest.raises(TypeError, match=f"{field} must be an int, not float"):
        rf.Session(g, **{option: 2.0})


def test_a_float_checkpoint_step_is_named(tmp_path):
    with pytest.raises(TypeError,
                       match="checkpoint step must be an int, not float"):
        rf.checkpoint.save(str(tmp_path / "c"), {"a": 1.0}, step=1.0)


def test_a_float_dropout_seed_is_named():
    with rf.Graph().as_default():
        x = rf.constant([1.0, 2.0])
        with pytest.raises(TypeError, match="dropout: seed must be an int"):
            rf.nn.dropout(x, 0.5, seed=1.5)


def test_constant_shape_past_int64_is_named():
    # Was NumPy's "iterator is too large" (np.prod wrapped past int64).
    with rf.Graph().as_default():
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match=r"shape \(1099511627776, 1099511627776\): "
                                 "element count overflows int64"):
            rf.constant(1.0, shape=(2 ** 40, 2 ** 40))
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="dim -2 is negative"):
            rf.constant(1.0, shape=(2, -2))
        with pytest.raises(TypeError, match="constant: shape: a dim"):
            rf.constant(1.0, shape=(2.0,))
        assert rf.constant(1.0, shape=(2, 0)).shape == (2, 0)
        assert rf.constant([1.0, 2.0], shape=(3, 2)).shape == (3, 2)
