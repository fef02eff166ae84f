"""One session used from several Python threads at once: each run is a
step of its own (the C library runs it with the GIL released), results
never mix, and fed arrays are released from whichever thread drops them."""

import threading

import numpy as np

import ringflow as rf
from ringflow import _convert

THREADS = 6
STEPS = 40


def test_concurrent_runs_of_one_session(rng):
    n = 4
    xs, ys = [], []
    for d in range(n):
        with rf.device(f"cpu:{d}"):
            xs.append(rf.placeholder(rf.float64, (5, 3)))
            ys.append(rf.reduce_sum(xs[-1] * 2.0, 0))
    sums = rf.nccl.all_sum(ys)
    seeds = rng.integers(1 << 30, size=THREADS)
    failures = []
    start = threading.Barrier(THREADS)
    kept_before = set(_convert._kept)

    with rf.Session(cpu_devices=n, timeout=30) as sess:
        def worker(seed):
            local = np.random.default_rng(seed)
            start.wait()
            try:
                for _ in range(STEPS):
                    values = [local.standard_normal((5, 3)) for _ in xs]
                    got = sess.run(sums, dict(zip(xs, values)))
                    want = sum(2.0 * v.sum(0) for v in values)
                    for g in got:
                        np.testing.assert_allclose(g, want, rtol=1e-12,
                                                   atol=1e-12)
            except BaseException as e:  # reported by the main thread
                failures.append(e)

        threads = [threading.Thread(target=worker, args=(s,))
                   for s in seeds]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[0]
    # Every fed array was given back.
    assert set(_convert._kept) <= kept_before


def test_graph_building_from_threads():
    """Ops added to one graph from several threads all land (each call
    holds the graph's lock)."""
    g = rf.Graph()
    x = None
    with g.as_default():
        x = rf.constant(1.0)

    def build():
        with g.as_default():
            for _ in range(50):
                rf.identity(x)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(g.get_operations()) == 1 + 4 * 50
