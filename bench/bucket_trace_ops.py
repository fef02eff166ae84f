"""Where a traced step of bench_bucket_allreduce went, by op.

    RF_BENCH_TRACE=DIR bench_bucket_allreduce ...   (one traced step per
    configuration and K: DIR/K<K>_<configuration>.json)
    python3 bench/bucket_trace_ops.py DIR/K256_fused.json DIR/K256_one.json

Per file: the step's span (first kernel's start to last kernel's end), and
per op: kernels, their summed duration over all devices (us), the largest
one, and the summed time as a share of span x devices. A kernel's duration
is the executor's start and end of it on its device's track, so a
collective participant includes its wait for the other devices.
"""

import json
import sys
from collections import defaultdict


def summary(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    ks = [e for e in events if e.get("ph") == "X"]
    if not ks:
        print(f"{path}: no kernels")
        return
    t0 = min(e["ts"] for e in ks)
    t1 = max(e["ts"] + e["dur"] for e in ks)
    devices = len({e["tid"] for e in ks})
    span = t1 - t0
    by = defaultdict(lambda: [0, 0.0, 0.0])
    for e in ks:
        b = by[e["cat"]]
        b[0] += 1
        b[1] += e["dur"]
        b[2] = max(b[2], e["dur"])
    print(f"## {path}: span {span:.1f} us, {len(ks)} kernels on {devices} "
          f"device tracks")
    print(f"{'op':<24} {'kernels':>7} {'sum us':>10} {'max us':>9} "
          f"{'share':>6}")
    for op, (n, tot, mx) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{op:<24} {n:7d} {tot:10.1f} {mx:9.1f} "
              f"{tot / (span * devices):6.2f}")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for p in sys.argv[1:]:
        summary(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
