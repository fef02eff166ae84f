"""What sess.run costs from Python over the C call it makes (issue 16, item 7).

One step: a 1 KiB float32 all-reduce (ringflow.nccl.all_sum) of 4 fed
placeholders on 4 virtual CPU devices, fetching the 4 results. Timed in one
process, on one session, alternating:
  run       sess.run(outputs, feed_dict) - the whole Python front end
  callable  f(*values), f = sess.make_callable(outputs, feed_list)
  c         lib.rf_session_run on the same session with feeds, fetches and
            output slots made once (what a C program pays; cffi's call is
            in it)
Prints the best and median of --rounds rounds of --steps steps each, each
Python path against the C call (ratio and difference of the medians), and
whether the difference is within the target (the C call + 5 us).

Then 64 MiB: a float32 array fed to a placeholder and fetched back through
an Identity on another device, by the callable, against a memcpy of 64 MiB
(np.copyto) in the same run: the fetched array must be the fed memory (by
address) and the step must cost a small fraction of one copy.

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


def time_run(sess, ys, feeds, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        sess.run(ys, feed_dict=feeds)
    return (time.perf_counter() - t0) / steps


def time_callable(f, values, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        f(*values)
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


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def big_feed(repeats):
    """(step seconds, memcpy seconds, same memory) for 64 MiB fed and
    fetched back."""
    n = 16 << 20  # float32: 64 MiB
    g = rf.Graph()
    with g.as_default():
        with rf.device("cpu:0"):
            x = rf.placeholder(rf.float32, (n,))
        with rf.device("cpu:1"):
            y = rf.identity(x)
    value = np.ones(n, np.float32)
    copy = np.empty_like(value)
    with rf.Session(g, cpu_devices=2) as sess:
        f = sess.make_callable(y, [x])
        same = f(value).__array_interface__["data"][0] == \
            value.__array_interface__["data"][0]
        step = best_of(lambda: f(value), repeats)
        plain = best_of(lambda: sess.run(y, {x: value}), repeats)
    memcpy = best_of(lambda: np.copyto(copy, value), repeats)
    return step, plain, memcpy, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    devices, elements = 4, 256  # 256 float32 = 1 KiB per device
    g, xs, ys = build(devices, elements)
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal(elements).astype(np.float32) for x in xs}
    values = list(feeds.values())
    with rf.Session(g, cpu_devices=devices) as sess:
        f = sess.make_callable(ys, feed_list=xs)
        sess.run(ys, feed_dict=feeds)  # compile, warm the caches
        f(*values)
        times = {"run": [], "callable": [], "c": []}
        for _ in range(args.rounds):
            times["run"].append(time_run(sess, ys, feeds, args.steps))
            times["callable"].append(time_callable(f, values, args.steps))
            times["c"].append(time_c(sess, xs, ys, feeds, args.steps))
    us = 1e6
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"sess.run overhead: {devices} CPU devices, all_sum of "
          f"{elements * 4} bytes each; {args.rounds} rounds of {args.steps} "
          f"steps, alternating")
    print(f"{'':10s} {'best(us)':>10s} {'median(us)':>11s} {'/ c':>6s} "
          f"{'- c(us)':>8s}  target (- c <= {TARGET_US:.0f} us)")
    for k, v in times.items():
        extra = (med[k] - med["c"]) * us
        verdict = "" if k == "c" else ("met" if extra <= TARGET_US
                                       else "missed")
        print(f"{k:10s} {min(v) * us:10.2f} {med[k] * us:11.2f} "
              f"{med[k] / med['c']:6.2f} {extra:8.2f}  {verdict}")
    step, plain, memcpy, same = big_feed(5)
    ms = 1e3
    print(f"64 MiB fed and fetched (Identity on another device), best of 5: "
          f"callable {step * ms:.3f} ms, sess.run {plain * ms:.3f} ms, "
          f"memcpy of 64 MiB {memcpy * ms:.3f} ms "
          f"(callable / memcpy {step / memcpy:.4f}); fetched array is the "
          f"fed memory: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
