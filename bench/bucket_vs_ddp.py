"""Gradient buckets: ringflow's compile-time buckets against PyTorch DDP's
run-time ones (issue 18, item 5), on the same K gradient tensors.

ringflow: bench_bucket_allreduce (C) with computed inputs, K all-reduces
of log-uniform sizes in [min, max] bytes on `devices` virtual devices,
unfused (bucket 0), fused (the library's default bucket, or --bucket) and
one all-reduce of all the bytes, us per step.

PyTorch: DistributedDataParallel with its default buckets (25 MiB, the
first 1 MiB) over a module of K parameters of the same sizes (the sizes
come from the same generator: glibc's rand_r, seed 18, reimplemented
below), whose loss is sum_k (p_k * x_k).sum(), so backward makes each
gradient with one kernel, as c + c does on the ringflow side. CPU: gloo,
`devices` processes on this host (threads per process: --threads).
GPU: NCCL with one rank (one GPU), as the issue asks. Per step: forward,
backward, the bucketed all-reduces; also the same under no_sync() (no
communication), so the difference is what DDP's communication costs.

    python3 bench/bucket_vs_ddp.py \
        --bench build-nc/bench/bench_bucket_allreduce [--type cpu|gpu]
        [--devices 4] [--min 4096] [--max 1048576]
    (--rows FILE instead of --bench: ringflow's side from that file.)
"""

import argparse
import math
import os
import subprocess
import sys
import time

RAND_MAX = 2147483647


def rand_r(seed):
    """glibc's rand_r: (value, next seed)."""
    nxt = seed
    nxt = (nxt * 1103515245 + 12345) & 0xFFFFFFFF
    result = (nxt // 65536) % 2048
    nxt = (nxt * 1103515245 + 12345) & 0xFFFFFFFF
    result = (result << 10) ^ ((nxt // 65536) % 1024)
    nxt = (nxt * 1103515245 + 12345) & 0xFFFFFFFF
    result = (result << 10) ^ ((nxt // 65536) % 1024)
    return result, nxt


def sizes(k_values, lo, hi):
    """Element counts per K, as bench_bucket_allreduce draws them (one seed
    running through K = 16, 64, 256 in turn)."""
    seed, out = 18, {}
    for k in k_values:
        counts = []
        for _ in range(k):
            r, seed = rand_r(seed)
            u = r / RAND_MAX
            counts.append(int(math.exp(math.log(lo) + u * (math.log(hi) -
                                                           math.log(lo))) / 4))
        out[k] = counts
    return out


def ringflow_side(args):
    if args.rows:  # the bench's output of an earlier run (bucket_gpu.sh)
        with open(args.rows) as f:
            text = f.read()
    else:
        cmd = [args.bench, str(args.devices), str(args.min), str(args.max),
               str(args.steps), str(args.rounds), str(args.bucket),
               args.type, "computed"]
        text = subprocess.run(cmd, check=True, capture_output=True,
                              text=True).stdout
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if f and f[0].isdigit():
            rows[int(f[0])] = (float(f[2]), float(f[3]), float(f[4]))
    return text.splitlines()[0], rows


def ddp_worker(rank, world, counts, args, queue):
    import torch
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.set_num_threads(args.threads)
    gpu = args.type == "gpu"
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    # device_id: NCCL binds the rank's GPU at once (barrier() warns without)
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank,
                            world_size=world,
                            device_id=dev if gpu else None)

    class Grads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.ones(n, device=dev))
                 for n in counts])

        def forward(self, xs):
            return sum((p * x).sum() for p, x in zip(self.p, xs))

    model = torch.nn.parallel.DistributedDataParallel(
        Grads(), device_ids=[0] if gpu else None)
    xs = [torch.full((n,), 1.0 + rank, device=dev) for n in counts]

    def step(sync):
        if sync:
            model(xs).backward()
        else:
            with model.no_sync():
                model(xs).backward()
        if gpu:
            torch.cuda.synchronize()

    best = {True: math.inf, False: math.inf}
    for sync in (True, False):
        for _ in range(5):
            step(sync)
    for _ in range(args.rounds):
        for sync in (True, False):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step(sync)
            us = (time.perf_counter() - t0) / args.steps * 1e6
            best[sync] = min(best[sync], us)
    if rank == 0:
        queue.put((best[True], best[False]))
    dist.destroy_process_group()


def ddp_side(counts, args):
    import torch.multiprocessing as mp
    world = 1 if args.type == "gpu" else args.devices
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=ddp_worker,
                         args=(r, world, counts, args, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    args.port += 1
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", help="path of bench_bucket_allreduce")
    ap.add_argument("--rows", help="read ringflow's side from this output "
                    "of bench_bucket_allreduce (computed inputs, same "
                    "--devices, --min and --max) instead of running it")
    ap.add_argument("--type", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--min", type=int, default=4096)
    ap.add_argument("--max", type=int, default=1048576)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bucket", type=int, default=-1,
                    help="ringflow's bucket bytes (default -1: the "
                         "library's default by device kind, 1 MiB on CPU "
                         "devices, 25 MiB on GPU devices)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per DDP process on CPU")
    ap.add_argument("--port", type=int, default=29531)
    args = ap.parse_args()
    if not args.bench and not args.rows:
        ap.error("one of --bench and --rows is required")
    header, rows = ringflow_side(args)
    ks = sorted(rows)
    counts = sizes(ks, args.min, args.max)
    print(header)
    world = 1 if args.type == "gpu" else args.devices
    print(f"# PyTorch DDP ({'nccl' if args.type == 'gpu' else 'gloo'}, "
          f"{world} rank(s), default buckets), us per step, best of "
          f"{args.rounds} rounds of {args.steps}")
    print(f"{'K':>5} {'bytes':>10} {'rf unfused':>10} {'rf fused':>9} "
          f"{'rf one':>8} {'ddp':>9} {'ddp nosync':>10} {'ddp/rf fused':>12}")
    for k in ks:
        ddp, nosync = ddp_side(counts[k], args)
        unf, fus, one = rows[k]
        total = 4 * sum(counts[k])
        print(f"{k:5d} {total:10d} {unf:10.1f} {fus:9.1f} {one:8.1f} "
              f"{ddp:9.1f} {nosync:10.1f} {ddp / fus:12.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
