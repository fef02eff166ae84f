"""What sess.run costs from Python over the C call it makes (issue 16, item 7).

One step: a 1 KiB float32 all-reduce (ringflow.nccl.all_sum) of 4 fed
placeholders on 4 virtual CPU devices, fetching the 4 results. Timed in one
process, on one session, alternating:
  python  sess.run(outputs, feed_dict) - the whole Python front end
  c       lib.rf_session_run on the same session with feeds, fetches and
          output slots made once (what a C program pays; cffi's call is in it)
Prints the best and median of --rounds rounds of --steps steps each, and the
difference against the target (the C call + 5 us).

  .venv/bin/python bench/python_run_overhead.py [--steps N] [--rounds R]
"""

import argparse
import statistics
import time

import numpy as np

import ringflow as rf
from ringflow import _convert
from ringflow._lib import check, ffi, lib

TARGET_US = 5.0


def build(devices: int, elements: int):
    g = rf.Graph()
    with g.as_default():
        xs = []
        for d in range(devices):
            with rf.device(f"cpu:{d}"):
                xs.append(rf.placeholder(rf.float32, (elements,)))
        ys = rf.nccl.all_sum(xs)
    return g, xs, ys


def time_python(sess, ys, feeds, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        sess.run(ys, feed_dict=feeds)
    return (time.perf_counter() - t0) / steps


def time_c(sess, xs, ys, feeds, steps):
    keep = [_convert.feed_to_c(feeds[x], x.dtype, x._code) for x in xs]
    c_feeds = ffi.new("rf_feed[]", len(xs))
    for i, x in enumerate(xs):
        c_feeds[i].output = x._c
        c_feeds[i].value = keep[i]
    c_fetches = ffi.new("rf_output[]", len(ys))
    for i, y in enumerate(ys):
        c_fetches[i] = y._c
    outs = ffi.new("rf_tensor *[]", len(ys))
    run, release = lib.rf_session_run, lib.rf_tensor_release
    s, n = sess._c, len(ys)
    t0 = time.perf_counter()
    for _ in range(steps):
        check(run(s, c_feeds, n, c_fetches, n, ffi.NULL, 0, outs))
        for i in range(n):
            release(outs[i])
    elapsed = (time.perf_counter() - t0) / steps
    del keep
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    devices, elements = 4, 256  # 256 float32 = 1 KiB per device
    g, xs, ys = build(devices, elements)
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal(elements).astype(np.float32) for x in xs}
    with rf.Session(g, cpu_devices=devices) as sess:
        sess.run(ys, feed_dict=feeds)  # compile, warm the caches
        py, c = [], []
        for _ in range(args.rounds):
            py.append(time_python(sess, ys, feeds, args.steps))
            c.append(time_c(sess, xs, ys, feeds, args.steps))
    us = 1e6
    print(f"sess.run overhead: {devices} CPU devices, all_sum of "
          f"{elements * 4} bytes each; {args.rounds} rounds of {args.steps} "
          f"steps, alternating")
    print(f"{'':10s} {'best(us)':>10s} {'median(us)':>11s}")
    print(f"{'python':10s} {min(py) * us:10.2f} "
          f"{statistics.median(py) * us:11.2f}")
    print(f"{'c':10s} {min(c) * us:10.2f} {statistics.median(c) * us:11.2f}")
    extra = (statistics.median(py) - statistics.median(c)) * us
    verdict = "met" if extra <= TARGET_US else "missed"
    print(f"python - c (medians): {extra:.2f} us; "
          f"target <= {TARGET_US:.0f} us: {verdict}")


if __name__ == "__main__":
    main()
