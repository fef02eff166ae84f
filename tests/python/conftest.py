"""Shared fixtures of the Python tests: seeded random data (the seed is
printed; RF_TEST_SEED=<n> reproduces a run), a fresh default graph per
test, and whether GPU devices can be had."""

import functools
import os
import time

import numpy as np
import pytest

import ringflow as rf


def pytest_report_header(config):
    return f"ringflow {rf.__version__}, seed {_seed()}"


@functools.lru_cache(maxsize=None)
def _seed() -> int:
    return int(os.environ.get("RF_TEST_SEED", int(time.time())))


@pytest.fixture
def rng(request):
    """A generator of its own per test: the run's seed mixed with the
    test's name."""
    salt = sum(request.node.nodeid.encode())
    return np.random.default_rng([_seed(), salt])


@pytest.fixture(autouse=True)
def fresh_default_graph():
    rf.reset_default_graph()
    yield


@functools.lru_cache(maxsize=None)
def gpu_unavailable_reason():
    """None when a session can have a GPU device, else why not."""
    try:
        with rf.Graph().as_default() as g:
            rf.Session(g, gpu_devices=1).close()
    except rf.errors.FailedPreconditionError as e:
        return e.message
    return None


def need_gpu():
    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"GPU tests skipped: {reason}")
