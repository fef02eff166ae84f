#!/usr/bin/env python3
"""One training step's GPU kernels from an Nsight Compute CSV, against the
H200's ceilings (issue 19 item 1).

Input: `ncu --csv --page raw --print-units base --metrics M ...` over a run of
consecutive kernel launches that spans several training steps, with
M = gpu__time_duration.sum, dram__bytes_read.sum, dram__bytes_write.sum and
the fp32 instruction counts smsp__sass_thread_inst_executed_op_{ffma,fadd,
fmul}_pred_on.sum. The executor's threads may launch a step's independent
kernels in a different order each step, so the steps in the window are
counted by a kernel that runs once per step (--marker, by default the
cross-entropy forward), and the table gives per-step averages per kernel
name over the whole window: launches, time, DRAM
bytes, fp32 FLOPs (2 per FMA), and the achieved rates as a share of the
ceilings (--bw, --flops: by default the device-to-device copy bandwidth
measured on these machines, 4.3 TB/s, and the fp32 non-tensor peak,
132 SMs x 128 lanes x 2 x 1.98 GHz = 66.9 TFLOP/s). A kernel is bound by
whichever share is larger.

Usage: ncu_step_table.py FILE.csv [--step-us MEASURED] [--title T]
"""
import argparse
import csv
import sys
from collections import OrderedDict

TIME = "gpu__time_duration.sum"
RD, WR = "dram__bytes_read.sum", "dram__bytes_write.sum"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"


def rows(path):
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    r = list(csv.reader(lines))
    head = r[0]
    out = []
    for row in r[1:]:
        d = dict(zip(head, row))
        if not d.get("ID", "").strip().isdigit():
            continue  # the units row
        out.append(d)
    return out


def num(d, k):
    try:
        return float(d.get(k, "0").replace(",", ""))
    except ValueError:
        return 0.0


def short(name, width=60):
    name = name.split("(")[0]
    return name if len(name) <= width else name[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step-us", type=float, default=0.0,
                    help="the step time measured without the profiler")
    ap.add_argument("--bw", type=float, default=4.3e12)
    ap.add_argument("--flops", type=float, default=66.9e12)
    ap.add_argument("--title", default="")
    ap.add_argument("--marker", default="xent_kernel",
                    help="a kernel name part launched once per step")
    a = ap.parse_args()
    ks = rows(a.csv)
    if not ks:
        sys.exit(f"{a.csv}: no kernel rows")
    steps = sum(1 for k in ks if a.marker in k["Kernel Name"])
    if steps == 0:
        sys.exit(f"{a.csv}: no launch of {a.marker!r}")
    agg = OrderedDict()
    for k in ks:
        e = agg.setdefault(short(k["Kernel Name"]), [0, 0.0, 0.0, 0.0])
        e[0] += 1 / steps
        e[1] += num(k, TIME) / 1e3 / steps  # ns -> us
        e[2] += (num(k, RD) + num(k, WR)) / steps
        e[3] += (2 * num(k, FFMA) + num(k, FADD) + num(k, FMUL)) / steps
    total = sum(e[1] for e in agg.values())
    print(f"## {a.title} ({len(ks) / steps:.1f} kernels per step, "
          f"{len(ks)} profiled over {steps} steps)")
    print("| kernel | launches | µs | share | MB | GB/s | % bw | GFLOP | "
          "TFLOP/s | % fp32 | bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, (n, us, b, fl) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        s = us * 1e-6
        bw, fr = (b / s, fl / s) if s > 0 else (0.0, 0.0)
        pb, pf = 100 * bw / a.bw, 100 * fr / a.flops
        print(f"| `{name}` | {n:.1f} | {us:.1f} | {100 * us / total:.0f}% | "
              f"{b / 1e6:.2f} | {bw / 1e9:.0f} | {pb:.0f}% | {fl / 1e9:.2f} | "
              f"{fr / 1e12:.1f} | {pf:.0f}% | "
              f"{'memory' if pb >= pf else 'compute'} |")
    line = f"kernels: {total:.1f} µs per step"
    if a.step_us > 0:
        line += (f"; measured step {a.step_us:.1f} µs: the GPU is busy "
                 f"{100 * total / a.step_us:.0f}% of the step")
    print(line)


if __name__ == "__main__":
    main()
