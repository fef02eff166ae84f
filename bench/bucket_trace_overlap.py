"""Whether a step's first gradient bucket meets while the backward pass still
computes (issue 18, item 1), read from a Chrome trace of one step
(`ringflow train ... --bucket-mb N --trace FILE`).

Per device track: when the first bucket's all-reduce joined (the AllReduce
kernel beside a _BucketPack; the kernel is asynchronous, so its
start is when the device handed its bucket over), and the compute kernels
of that device that ran after it - everything but collectives, the
bucket's pack and unpack, sends, receives, and the optimizer's updates
(Apply*/ResourceApply*), which wait for the reduced gradients. Compute
after the first bucket is the overlap: without buckets (or with the bucket
last) there is none. On GPU devices the times are the host's (kernel
enqueues), not the GPU's.

    python3 bench/bucket_trace_overlap.py TRACE.json
Exit status 0 when every device overlapped, 1 when some did not, 2 when the
trace has no bucket.
"""

import json
import sys

NOT_COMPUTE = ("AllReduce", "AllGather", "ReduceScatter", "_BucketPack",
               "_BucketUnpack", "_Send", "_Recv", "_ReduceSend",
               "_ReduceRecv", "_BroadcastSend", "_BroadcastRecv", "_Retval",
               "_Arg", "NoOp", "Const")


def is_update(op):
    return op.startswith("Apply") or op.startswith("ResourceApply") or \
        "Apply" in op


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-4], file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    tracks = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault(e["tid"], []).append(e)
    devices = overlapped = 0
    for tid in sorted(tracks):
        evs = sorted(tracks[tid], key=lambda e: e["ts"])
        # A bucket's nodes share a prefix: P/_BucketPack, P/AllReduce.
        packs = {e["name"].rsplit("/", 1)[0] for e in evs
                 if e["cat"] == "_BucketPack"}
        buckets = [e for e in evs if e["cat"] == "AllReduce" and
                   e["name"].rsplit("/", 1)[0] in packs]
        if not buckets:
            continue
        devices += 1
        first = buckets[0]
        t0 = first["ts"]
        after = [e for e in evs if e["ts"] >= t0 and
                 e["cat"] not in NOT_COMPUTE and not is_update(e["cat"])]
        busy = sum(e["dur"] for e in after)
        reduces = [e for e in evs if e["cat"] == "AllReduce"]
        step_end = max(e["ts"] + e["dur"] for e in evs)
        top = sorted(after, key=lambda e: -e["dur"])[:3]
        print(f"{names.get(tid, tid)}: {len(reduces)} all-reduces "
              f"({len(buckets)} buckets); first bucket '{first['name']}' "
              f"joined at {t0:.0f} us of {step_end:.0f}; then "
              f"{len(after)} compute kernels, {busy:.0f} us"
              + (" (" + ", ".join(f"{e['cat']} {e['dur']:.0f}"
                                  for e in top) + ")" if top else ""))
        overlapped += bool(after)
    if not devices:
        print("no bucket (_BucketPack) in the trace")
        return 2
    print(f"overlap: compute after the first bucket on {overlapped} of "
          f"{devices} devices")
    return 0 if overlapped == devices else 1


if __name__ == "__main__":
    sys.exit(main())
