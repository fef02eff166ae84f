#!/usr/bin/env python3
"""Training throughput of `ringflow train` against PyTorch, in one run.

Both train the same model (MLP 784-512-256-10, ReLU, softmax cross-entropy,
Adam lr 1e-3, eps 1e-7) on the same data (Fashion-MNIST, shuffled once per
epoch, each batch gathered from the preloaded training set), at the same
global batch, with the same number of warm-up and timed steps and the same
thread count (ringflow's pool has one thread per core; PyTorch gets
torch.set_num_threads). Neither evaluates during the timed steps; both fetch
the loss every step.

ringflow runs with 1 device and with 4 virtual devices (data-parallel), the
latter in each --sync mode given: allreduce (every device applies the whole
Adam update) and sharded (reduce-scatter, Adam on each device's rows,
all-gather). PyTorch runs the same global batch in one process:
that is what a user of this machine would compare against. Its figure is
measured once per batch and repeat and used for both rows.

The run starts once the 1-minute load average is below --max-load. Each
repeat measures every configuration once, interleaved; "others" is the CPU
(in cores) that processes other than the benchmark used meanwhile, and a
measurement is taken again (up to --tries times) when it exceeds
--max-others: on 2 cores another busy process halves what either side gets,
and PyTorch's OpenMP threads suffer most from it. The table holds the median
over repeats. Exit status 1 when a target is missed.

--ddp N adds PyTorch DistributedDataParallel with N processes (gloo, one
process per device, the global batch split among them) and a column
comparing ringflow's --sync allreduce on N devices with it; the targets stay
against single-process PyTorch.

Usage: train_vs_pytorch.py --ringflow build/tools/ringflow [--repeats 3]
       [--ddp 4]
"""
import argparse
import gzip
import os
import platform
import re
import resource
import statistics
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

TARGETS = {64: 1.2, 256: 1.0, 1024: 1.0}  # ringflow / PyTorch, issue 5


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, rank = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(dims)


def load_train(data_dir):
    x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.reshape(len(x), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(y.astype(np.int64))


def make_model(seed):
    """784-512-256-10 with Glorot-uniform weights and zero biases (ringflow's
    initialisation; the values differ, the distribution does not)."""
    torch.manual_seed(seed)
    layers = []
    sizes = [784, 512, 256, 10]
    for i in range(3):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        torch.nn.init.xavier_uniform_(lin.weight)
        torch.nn.init.zeros_(lin.bias)
        layers.append(lin)
        if i < 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class CpuMeter:
    """CPU used by other processes while a block runs, in cores: the
    machine's busy time from /proc/stat less this process's and its
    children's (rusage)."""

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(t) for t in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own():
        s = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    def __enter__(self):
        self.t, self.busy, self.own = time.monotonic(), self._busy(), self._own()
        return self

    def __exit__(self, *exc):
        wall = time.monotonic() - self.t
        others = (self._busy() - self.busy) - (self._own() - self.own)
        self.others = max(0.0, others / wall) if wall > 0 else 0.0


def torch_bench(x, y, batch, warmup, steps, seed):
    model = make_model(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999),
                           eps=1e-7)
    gen = torch.Generator().manual_seed(seed)
    per_epoch, s, perm = len(x) // batch, len(x) // batch, None
    start = time.perf_counter()
    for i in range(warmup + steps):
        if s == per_epoch:
            perm, s = torch.randperm(len(x), generator=gen), 0
        if i == warmup:
            start = time.perf_counter()
        idx = perm[s * batch:(s + 1) * batch]
        s += 1
        xb, yb = x[idx], y[idx]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        last = loss.item()
    secs = time.perf_counter() - start
    return steps * batch / secs, last


def _ddp_worker(rank, world, init, data_dir, batch, warmup, steps, seed,
                threads, out):
    """One rank of PyTorch's DistributedDataParallel over gloo: rows
    [rank * batch / world, ...) of every global batch, the same batches as
    torch_bench; rank 0 reports the global samples/s."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=init, rank=rank,
                            world_size=world)
    x, y = load_train(data_dir)
    model = DistributedDataParallel(make_model(seed))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999),
                           eps=1e-7)
    gen = torch.Generator().manual_seed(seed)
    per, rows = len(x) // batch, batch // world
    s, perm, start, last = per, None, time.perf_counter(), 0.0
    for i in range(warmup + steps):
        if s == per:
            perm, s = torch.randperm(len(x), generator=gen), 0
        if i == warmup:
            dist.barrier()
            start = time.perf_counter()
        idx = perm[s * batch + rank * rows:s * batch + (rank + 1) * rows]
        s += 1
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        last = loss.item()
    dist.barrier()
    secs = time.perf_counter() - start
    if rank == 0:
        out.put((steps * batch / secs, last))
    dist.destroy_process_group()


def ddp_bench(data_dir, batch, world, warmup, steps, seed, threads):
    """PyTorch DDP with `world` processes (gloo) on the global batch: the
    like-for-like counterpart of ringflow's --sync allreduce on `world`
    virtual devices. Each process gets max(1, threads / world) threads."""
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        out = ctx.SimpleQueue()
        mp.spawn(_ddp_worker, nprocs=world, join=True,
                 args=(world, f"file://{tmp}/rendezvous", data_dir, batch,
                       warmup, steps, seed, max(1, threads // world), out))
        return out.get()


def ringflow_bench(binary, data_dir, batch, devices, sync, warmup, steps,
                   seed):
    spec = "cpu:0" if devices == 1 else f"cpu:0-{devices - 1}"
    cmd = [binary, "train", "--bench", "--quiet", "--devices", spec,
           "--sync", sync,
           "--batch", str(batch), "--warmup", str(warmup), "--steps",
           str(steps), "--seed", str(seed), "--data", data_dir]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = re.search(r"samples_per_sec=([0-9.]+).*loss=([0-9.naif-]+)", out)
    if not m:
        sys.exit(f"no samples_per_sec= line from {' '.join(cmd)}:\n{out}")
    return float(m.group(1)), float(m.group(2))


def others_now(seconds=1.0):
    """Cores other processes use right now (sampled over a second)."""
    with CpuMeter() as m:
        time.sleep(seconds)
    return m.others


def measure(fn, max_others, tries):
    """fn() while other processes stay under max_others cores: waits for the
    machine to quieten, and measures again (up to tries times) when something
    else ran meanwhile. Returns fn's result and the others' load."""
    for attempt in range(tries):
        t0 = time.monotonic()
        while others_now() > max_others and time.monotonic() - t0 < 120:
            pass
        with CpuMeter() as m:
            result = fn()
        if m.others <= max_others:
            break
    return result, m.others, attempt + 1


def blas_of_torch():
    cfg = torch.__config__.show()
    for pat in (r"BLAS_INFO=(\w+)",):
        m = re.search(pat, cfg)
        if m:
            mkl = re.search(r"Math Kernel Library Version ([\w.]+)", cfg)
            return m.group(1) + (f" {mkl.group(1)}" if mkl and m.group(1) == "mkl" else "")
    return "unknown"


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ringflow", required=True, help="the ringflow binary")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batches", default="64,256,1024")
    ap.add_argument("--devices", default="1,4")
    ap.add_argument("--sync", default="allreduce,sharded",
                    help="ringflow's --sync modes for more than one device")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--samples", type=int, default=25600,
                    help="timed samples per measurement; steps = "
                    "max(100, samples / batch), the same for both")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-load", type=float, default=1.5,
                    help="wait (up to --wait s) for the 1-minute load average "
                    "to fall below this before starting")
    ap.add_argument("--wait", type=float, default=900)
    ap.add_argument("--max-others", type=float, default=0.2,
                    help="measure again when other processes used more "
                    "cores than this meanwhile")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ddp", type=int, default=0, metavar="N",
                    help="also measure PyTorch DistributedDataParallel with N "
                    "processes (gloo) and compare --sync allreduce on N "
                    "devices with it in an extra column (0: not measured)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    devices = [int(d) for d in args.devices.split(",")]
    syncs = args.sync.split(",")
    configs = [(d, s) for d in devices for s in (["-"] if d == 1 else syncs)]
    rf_version = subprocess.run([args.ringflow, "version"], check=True,
                                capture_output=True, text=True).stdout.strip()
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; threads "
          f"{args.threads}")
    print(f"{rf_version} (OpenBLAS, single-threaded per kernel); PyTorch "
          f"{torch.__version__} (BLAS {blas_of_torch()}, "
          f"{torch.get_num_threads()} threads)")
    x, y = load_train(args.data)
    steps = {b: max(100, args.samples // b) for b in batches}

    rf = {(b, d, s): [] for b in batches for d, s in configs}
    pt = {b: [] for b in batches}
    ddp = {b: [] for b in batches}
    t0 = time.monotonic()
    while os.getloadavg()[0] >= args.max_load and time.monotonic() - t0 < args.wait:
        time.sleep(10)
    start_load = os.getloadavg()[0]
    print(f"load average at the start {start_load:.2f}", flush=True)
    others = []

    def record(what, result, m_others, tries, into):
        rate, loss = result
        into.append(rate)
        others.append(m_others)
        print(f"  {what:28s} {rate:9.0f} samples/s  loss {loss:.4f}  "
              f"others {m_others:.2f} cores{'' if tries == 1 else f' ({tries} tries)'}",
              flush=True)

    for r in range(args.repeats):
        print(f"repeat {r + 1}/{args.repeats}", flush=True)
        for b in batches:
            record(f"batch {b} PyTorch", *measure(
                lambda: torch_bench(x, y, b, args.warmup, steps[b], args.seed),
                args.max_others, args.tries), pt[b])
            if args.ddp:
                record(f"batch {b} PyTorch DDP x{args.ddp}", *measure(
                    lambda: ddp_bench(args.data, b, args.ddp, args.warmup,
                                      steps[b], args.seed, args.threads),
                    args.max_others, args.tries), ddp[b])
            for d, sync in configs:
                what = f"batch {b} ringflow {d} device" + (
                    "" if d == 1 else f"s {sync}")
                record(what, *measure(lambda: ringflow_bench(
                    args.ringflow, args.data, b, d,
                    "allreduce" if d == 1 else sync, args.warmup, steps[b],
                    args.seed), args.max_others, args.tries),
                    rf[(b, d, sync)])

    print(f"\nmedian of {args.repeats}; load average {start_load:.2f} at the "
          f"start; other processes used at most {max(others):.2f} cores "
          f"(median {statistics.median(others):.2f}) during a measurement")
    print("steps: " + ", ".join(f"batch {b}: {args.warmup} warm-up + "
                                f"{steps[b]} timed" for b in batches))
    print("PyTorch runs each global batch in one process; its figure is the "
          "same for every ringflow row.\n")
    if args.ddp:
        print(f"The last column: --sync allreduce on {args.ddp} devices "
              f"against PyTorch DDP with {args.ddp} processes (gloo, "
              f"{max(1, args.threads // args.ddp)} thread each) on the same "
              "global batch; not part of the targets.\n")
    ddp_head = f" vs DDP x{args.ddp} |" if args.ddp else ""
    print("| batch | devices | sync | ringflow samples/s | PyTorch samples/s "
          "| ratio | target | met |" + ddp_head)
    print("|---:|---:|:---|---:|---:|---:|---:|:---:|" +
          ("---:|" if args.ddp else ""))
    missed = 0
    for b in batches:
        ptm = statistics.median(pt[b])
        for d, sync in configs:
            rfm = statistics.median(rf[(b, d, sync)])
            ratio = rfm / ptm
            target = TARGETS.get(b)
            met = "-" if target is None else ("yes" if ratio >= target else "NO")
            missed += met == "NO"
            extra = ""
            if args.ddp:
                like = d == args.ddp and sync == "allreduce"
                extra = (f" {rfm / statistics.median(ddp[b]):.2f} "
                         f"({statistics.median(ddp[b]):.0f}) |" if like
                         else " - |")
            print(f"| {b} | {d} | {sync} | {rfm:.0f} | {ptm:.0f} | {ratio:.2f} | "
                  f"{'-' if target is None else f'{target:.1f}'} | {met} |"
                  + extra)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
