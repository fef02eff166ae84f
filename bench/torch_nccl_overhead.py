"""PyTorch's cost per all-reduce call on one GPU, for `ringflow bench
--devices gpu:0 --backend nccl` to be read against (scripts/gpu_run.sh runs
both in one call): one process, a one-rank NCCL process group, float32 sum,
each call `dist.all_reduce(x)` then `torch.cuda.synchronize()`, on the same
sizes (8 B .. MAX in steps of x4) and with the same timing (warm-up, batches
of at least MIN_TIME/5 s, the median of 5). With --per-step K, K
all-reduces (of K tensors) then one synchronize, time per all-reduce (as
`ringflow bench --per-step K`). NVLink multicast stays off.

    python3 bench/torch_nccl_overhead.py [--max BYTES] [--min-time S]
                                         [--per-step K]
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def per_call(fn, min_time):
    for _ in range(3):
        fn()
    k = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        if time.perf_counter() - t0 >= min_time / 5 or k >= 1 << 20:
            break
        k *= 2
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        times.append((time.perf_counter() - t0) / k)
    return statistics.median(times), k


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max", type=int, default=512 << 20)
    p.add_argument("--min-time", type=float, default=0.1)
    p.add_argument("--per-step", type=int, default=1)
    a = p.parse_args()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, "
          f"{torch.cuda.get_device_name(0)}; one-rank process group; "
          f"{a.per_step} all-reduce(s) per synchronize, time per all-reduce")
    print(f"{'bytes':>11} {'time(us)':>10} {'iters':>8}")
    size = 8
    while size <= a.max:
        xs = [torch.ones(size // 4, dtype=torch.float32, device="cuda")
              for _ in range(a.per_step)]

        def call():
            for x in xs:
                dist.all_reduce(x)
            torch.cuda.synchronize()

        t, k = per_call(call, a.min_time)
        for x in xs:
            assert x[0].item() == 1.0 and x[-1].item() == 1.0
        print(f"{size:>11} {t / a.per_step * 1e6:>10.1f} {k:>8}", flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
