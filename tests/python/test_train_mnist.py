"""examples/python/train_mnist.py: a few hundred steps of data-parallel
training on 4 virtual CPU devices learn (the loss falls, the test accuracy
is far above chance, the replicas stay identical), and, where the
`ringflow` tool is built, reach exactly the test accuracy `ringflow train`
prints for the same seed and settings."""

import glob
import importlib.util
import os
import re
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DATA = os.environ.get("RF_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
STEPS = 300

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")),
    reason=f"no Fashion-MNIST in {DATA} (Debian's dataset-fashion-mnist, "
           "or set RF_FASHION_MNIST)")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location(
        "train_mnist", os.path.join(ROOT, "examples", "python",
                                    "train_mnist.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(example):
    return example.train(devices=4, epochs=1, steps=STEPS, data=DATA,
                         quiet=True)


def test_training_learns(run):
    losses = run["losses"]
    assert len(losses) == STEPS
    assert np.mean(losses[-30:]) < 0.6 * np.mean(losses[:30])
    assert run["accuracy"][0] > 0.7  # chance is 0.1
    assert run["spread"] == [0.0]


def test_initial_values_are_the_c_trainers(example):
    """Glorot-uniform bounds, zero biases, and the splitmix64 stream's first
    numbers (computed here one at a time, as tools/mlp.c does)."""
    values = example.initial_values(7)
    assert [v.shape for v in values] == [(784, 512), (512,), (512, 256),
                                         (256,), (256, 10), (10,)]
    mask = (1 << 64) - 1

    def splitmix(state):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return state, z ^ (z >> 31)

    state, limit = 7, (6.0 / (784 + 512)) ** 0.5
    for i in range(5):
        state, z = splitmix(state)
        u = (z >> 11) * (1.0 / (1 << 53))
        assert values[0].flat[i] == np.float32((2 * u - 1) * limit)
    for p, v in enumerate(values):
        if p % 2:
            assert not v.any()
        else:
            bound = (6.0 / (v.shape[0] + v.shape[1])) ** 0.5
            assert np.abs(v).max() <= bound and v.std() > bound / 3


def ringflow_tool():
    found = os.environ.get("RINGFLOW_TOOL")
    if found:
        return found
    tools = sorted(glob.glob(os.path.join(ROOT, "build*", "tools",
                                          "ringflow")), key=os.path.getmtime)
    return tools[-1] if tools else None


def test_same_accuracy_as_ringflow_train(run):
    tool = ringflow_tool()
    if not tool:
        pytest.skip("no built ringflow tool (build*/tools/ringflow or "
                    "RINGFLOW_TOOL) to compare with")
    out = subprocess.run(
        [tool, "train", "--devices", "cpu:0-3", "--epochs", "1", "--steps",
         str(STEPS), "--data", DATA, "--quiet"],
        check=True, capture_output=True, text=True).stdout
    m = re.search(r"test accuracy ([0-9.]+)%", out)
    assert m, out
    assert f"{100 * run['accuracy'][0]:.2f}" == m.group(1)
