#!/usr/bin/env python3
"""Where PyTorch's CPU step of bench/cnn_cpu_vs_pytorch.py's network spends
its time: torch.profiler over `--steps` steps after 3 warm-up steps, the ops
by self CPU time (ms a step). The ringflow side of the breakdown is `perf
record` on `ringflow train --model cnn --bench` (docs/PERFORMANCE.md).

Usage: cnn_cpu_torch_profile.py [--batch 64] [--steps 10] [--threads 2]
"""
import argparse
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn_cpu_vs_pytorch import Cnn  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--channels-last", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = Cnn().to(memory_format=fmt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    x = torch.rand(args.batch, 1, 28, 28).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()

    for _ in range(3):
        step()
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows)
    print(f"batch {args.batch}: {total / 1e3 / args.steps:.1f} ms self CPU "
          "a step (profiler's sum)")
    for e in rows[:15]:
        print(f"  {e.key:40s} {e.self_cpu_time_total / 1e3 / args.steps:8.2f}"
              f" ms  {100 * e.self_cpu_time_total / total:5.1f}%")


if __name__ == "__main__":
    main()
