#!/usr/bin/env python3
"""GPU time per replayed step by kind of kernel, from bench/cupti_trace.c
CSVs: for each CSV, the records inside CUDA graphs (graph id != 0) summed
per category and divided by the number of replays of their graph.

  python3 bench/cupti_step_categories.py trace.csv[.gz] ...

Categories go by kernel name: convolution (cuDNN's and CUTLASS's
convolution kernels, FFT and Winograd pieces, complex GEMMs of FFT
convolutions, NHWC/NCHW conversions), pooling, dense GEMMs (cuBLAS,
cuBLASLt, CUTLASS GEMMs and their split-K reductions), optimizer, other.
Work launched outside graphs (PyTorch's fused Adam after a
reduce-overhead step, for one) is not counted. Times in microseconds.
"""
import collections
import csv
import gzip
import sys

CONV = ("conv", "fft2d", "winograd", "wgrad", "dgrad", "fprop", "cf32",
        "flip_filter", "nhwctonchw", "nchwtonhwc", "implicit")


def category(name):
    n = name.lower()
    if any(k in n for k in CONV):
        return "convolution"
    if "pool" in n:
        return "pooling"
    if "gemm" in n or "splitk" in n or "bgrad" in n:
        return "dense GEMMs"
    if "adam" in n or "foreach" in n or "state_kernels" in n:
        return "optimizer"
    return "other"


def main(paths):
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            rows = [r for r in csv.DictReader(f) if r["graph"] != "0"]
        by_graph = collections.defaultdict(list)
        for r in rows:
            by_graph[r["graph"]].append(r)
        total = collections.Counter()
        replays = {}
        for g, rs in by_graph.items():
            # every record of a graph runs once per replay: the rarest
            # name's count is the number of replays traced
            names = collections.Counter(r["name"] for r in rs)
            replays[g] = min(names.values())
            for r in rs:
                total[category(r["name"])] += \
                    (int(r["end"]) - int(r["start"])) / 1000 / replays[g]
        print(f"{path}: graphs {dict(replays)} (replays each)")
        for k, v in sorted(total.items(), key=lambda kv: -kv[1]):
            print(f"  {k:12s} {v:8.1f}")
        print(f"  {'total':12s} {sum(total.values()):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
