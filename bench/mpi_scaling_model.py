#!/usr/bin/env python3
"""bench/mpi_scaling_model.py - the scaling model of docs/SCALING.md.

Two uses:

  python3 bench/mpi_scaling_model.py summary RUN.txt...
      medians, per N and path, of bench/mpi_scaling.sh outputs (several runs
      of the script: each file may hold any number of runs);

  python3 bench/mpi_scaling_model.py model [--alpha US] [--recv US]
      [--send US] [--round US] [--dup US] [--beta GBPS] [--coll C]
      [--skew US] [--blocking]
      the protocol of each path (docs/MULTIPROCESS.md, "How a collective
      runs") replayed for N = 2 .. 1,024 processes, one device each, as a
      discrete-event simulation fed by per-message costs (defaults: the
      figures measured on the development VM, docs/SCALING.md: one host's
      shared memory).

What the model assumes:
  - one core per process (no oversubscription) and a network without
    contention, except task 0's own link: messages of one round between
    different pairs travel at once, each costing alpha (one-way latency) +
    bytes / beta; the READYs into task 0 and its GOs out cross its link one
    after another;
  - task 0's communication thread handles its control messages one at a
    time: `recv` µs of CPU to take one READY off the queue (probe, receive,
    match), `send` µs to post one GO; the other tasks' READYs leave at once
    at times spread uniformly over `skew` µs (how far apart the processes
    reach the collective), so task 0 serves a queue;
  - the check (MPI_Iallreduce of 40 bytes) is libnbc's binomial tree, as
    OpenMPI 4.1 picks it below 64 KiB: reduce to rank 0 (task 0), then
    broadcast, 2 ceil(log2 N) rounds, each alpha + `round` µs of CPU;
    task 0, the root, receives ceil(log2 N) messages and sends as many;
  - MPI_Comm_dup (the first step's communicator of each kept collective -
    two, one after the other, with --blocking: its data's own - and the
    session's own) is two blocking all-reductions (recursive
    doubling: log2 N rounds, 2 more when N is not a power of two; OpenMPI's
    context id agreement, more when ids collide) plus `dup` µs of local
    work;
  - rf_session_new: two duplicates at once (one dup's time) and an
    all-gather of 12 bytes a task (log2 N rounds, doubling);
  - READY is the 168-byte header + the name (3 bytes) + the group's device
    names ("/task:t/cpu:0," each), GO the header + the name; a collective's
    READYs from all N tasks and N GOs go through task 0; the check is 40
    bytes each way per round in every process.
"""
import argparse
import heapq
import math
import random
import re
import statistics
import sys

HEADER = 168  # sizeof(rf__mpi_msg), printed by bench_mpi_scaling


def devices_bytes(n):
    """Length of "/task:0/cpu:0,/task:1/cpu:0,..." for n tasks, with NUL."""
    return sum(len("/task:%d/cpu:0" % t) for t in range(n)) + n


def ready_bytes(n):
    return HEADER + 3 + devices_bytes(n)


def go_bytes():
    return HEADER + 3


def rounds(n):
    """Recursive doubling (MPI_Allreduce's small-message choice): log2 N
    rounds, 2 more when N is not a power of two."""
    r = math.ceil(math.log2(n)) if n > 1 else 0
    return r + (2 if n & (n - 1) else 0)


def tree(n):
    """libnbc's binomial all-reduce (MPI_Iallreduce below 64 KiB, the
    check): a reduce up a binomial tree to rank 0 (task 0), then a
    broadcast down it: 2 ceil(log2 N) rounds; rank 0 receives and sends
    ceil(log2 N) messages, the others one up and one down plus their
    children's."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def star(n, a, rng):
    """One collective through task 0: each task's READY (task 0's own too)
    crosses task 0's link (one at a time: bytes / beta each) into its queue;
    task 0 serves the queue FIFO, then posts N GOs one by one, each leaving
    by its link. Returns (latency of the last GO's arrival, task 0 CPU)."""
    leaves = sorted((rng.uniform(0, a.skew), t) for t in range(n))
    link, queue = 0.0, []
    for leave, t in leaves:
        if t == 0:
            heapq.heappush(queue, leave)
            continue
        link = max(link, leave + a.alpha) + ready_bytes(n) / (a.beta * 1e3)
        heapq.heappush(queue, link)
    clock, cpu = 0.0, 0.0
    while queue:
        clock = max(clock, heapq.heappop(queue)) + a.recv
        cpu += a.recv
    last = out = clock
    for t in range(n):
        clock += a.send
        cpu += a.send
        if t:
            out = max(out, clock) + go_bytes() / (a.beta * 1e3)
            last = max(last, out + a.alpha)
    return last, cpu


def check(n, a, rng):
    """The steady state's check: every process joins when it arrives, then
    the binomial tree's rounds. Returns (latency, task 0's CPU: the root's
    ceil(log2 N) receives and as many sends)."""
    start = max(rng.uniform(0, a.skew) for _ in range(n))
    r = 2 * tree(n)
    return start + r * (a.alpha + 40 / (a.beta * 1e3) + a.round), r * a.round


def dup(n, a):
    r = rounds(n)
    return 2 * r * (a.alpha + a.round) + a.dup


def session(n, a):
    """rf_session_new's MPI part: two communicator duplicates (control and
    data, at once) and an all-gather of 12 bytes a task (recursive
    doubling: log2 N rounds, the message doubling each round)."""
    gather = sum(a.alpha + a.round + 12 * 2**i / (a.beta * 1e3)
                 for i in range(rounds(n)))
    return dup(n, a) + gather


def model(a):
    rng = random.Random(1)
    print("model: alpha %.2f us, beta %.1f GB/s, task 0 recv %.2f us send "
          "%.2f us a message, check round %.2f us, dup %.1f us + 2 "
          "all-reduces, skew %.1f us, %d collectives a step%s"
          % (a.alpha, a.beta, a.recv, a.send, a.round, a.dup, a.skew,
             a.coll, ", blocking data (2 dups each)" if a.blocking else ""))
    print()
    print("| N | path | task 0 msgs/coll (in+out) | task 0 bytes in/coll "
          "| task 0 CPU/coll µs | other task msgs/coll | latency/coll µs |")
    print("|---|---|---|---|---|---|---|")
    rows = {}
    for n in [2, 4, 8, 16, 64, 256, 1024]:
        lat_s, cpu_s = star(n, a, rng)
        lat_c, cpu_c = check(n, a, rng)
        # two duplicates for a collective with blocking data (its data's
        # own communicator), made one after the other at the GO
        lat_d = dup(n, a) * (2 if a.blocking else 1)
        r = tree(n)
        rows[n] = (lat_s, cpu_s, lat_c, cpu_c, lat_d)
        # first step, either path: READY/GO (+ the dup when kept)
        print("| %d | first step (both); READY/GO every step | %d + %d | %s "
              "| %.0f | 1 out, 1 in | %.0f (agree-once: + dup %.0f) |"
              % (n, n, n, f"{n * ready_bytes(n):,}", cpu_s, lat_s, lat_d))
        print("| %d | steady, agree-once | %d + %d | %d | %.1f "
              "| 1-%d out, 1-%d in | %.1f |"
              % (n, r, r, 40 * r, cpu_c, r, r, lat_c))
    print()
    print("Per step of %d collectives (the data not counted):" % a.coll)
    print()
    print("| N | READY/GO: task 0 CPU µs | agree-once: task 0 CPU µs "
          "| READY/GO latency µs | agree-once latency µs | first step, "
          "agree-once: latency µs (of it, dups) | session creation µs |")
    print("|---|---|---|---|---|---|---|")
    for n, (lat_s, cpu_s, lat_c, cpu_c, lat_d) in rows.items():
        # collectives of a step: their READYs queue at task 0 behind each
        # other; their checks run on their own communicators at once.
        print("| %d | %.0f | %.1f | %.0f | %.1f | %.0f (%.0f) | %.0f |"
              % (n, a.coll * cpu_s, a.coll * cpu_c, a.coll * cpu_s + lat_s -
                 cpu_s, lat_c, a.coll * cpu_s + lat_s - cpu_s + a.coll * lat_d,
                 a.coll * lat_d, session(n, a)))


def summary(files):
    head = re.compile(r"N=(\d+) path=(\S+) .* load=([\d.]+)")
    line = re.compile(
        r"(create|first|steady)\s+task0: wall\s+([\d.]+) us cpu\s+([\d.]+) us"
        r" sent\s+([\d.]+) recv@0\s+([\d.]+) \| others mean: wall\s+([\d.]+) "
        r"cpu\s+([\d.]+) sent\s+([\d.]+)")
    raw = re.compile(r"raw\s+allreduce40B ([\d.]+) us\s+comm_dup ([\d.]+) us"
                     r"\s+star600B ([\d.]+) us\s+task0 cpu/msg: recv ([\d.]+)"
                     r" us send ([\d.]+) us")
    data, key = {}, None
    for f in files:
        for s in open(f):
            m = head.search(s)
            if m:
                key = (int(m.group(1)), m.group(2))
                data.setdefault(key, {}).setdefault("load", []).append(
                    float(m.group(3)))
                continue
            m = line.search(s)
            if m and key:
                d = data[key].setdefault(m.group(1), [])
                d.append([float(x) for x in m.groups()[1:]])
                continue
            m = raw.search(s)
            if m and key:
                data[key].setdefault("raw", []).append(
                    [float(x) for x in m.groups()])

    def med(rows, i):
        return statistics.median(r[i] for r in rows)

    print("| N | path | runs | load | phase | task 0 sent | task 0 recv "
          "(others' sent) | other task sent (mean) | task 0 CPU µs "
          "| other task CPU µs (mean) | wall µs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (n, path) in sorted(data):
        d = data[(n, path)]
        load = "%.1f-%.1f" % (min(d["load"]), max(d["load"]))
        for ph in ("create", "first", "steady"):
            rows = d.get(ph, [])
            if not rows:
                continue
            print("| %d | %s | %d | %s | %s | %.0f | %.0f | %.0f | %.0f "
                  "| %.0f | %.0f |"
                  % (n, path, len(rows), load, ph, med(rows, 2),
                     med(rows, 3), med(rows, 6), med(rows, 1),
                     med(rows, 5), med(rows, 0)))
    print()
    print("| N | path | 40-byte MPI_Allreduce µs | MPI_Comm_dup µs | star "
          "(task 0 and N-1 600-byte messages each way) µs | task 0 CPU per "
          "message received / posted µs |")
    print("|---|---|---|---|---|---|")
    for (n, path) in sorted(data):
        rows = data[(n, path)].get("raw", [])
        if rows:
            print("| %d | %s | %.1f | %.0f | %.1f | %.2f / %.2f |"
                  % (n, path, med(rows, 0), med(rows, 1), med(rows, 2),
                     med(rows, 3), med(rows, 4)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary")
    s.add_argument("files", nargs="+")
    m = sub.add_parser("model")
    m.add_argument("--alpha", type=float, default=0.5)
    m.add_argument("--recv", type=float, default=0.6)
    m.add_argument("--send", type=float, default=2.1)
    m.add_argument("--round", type=float, default=0.3)
    m.add_argument("--dup", type=float, default=6.0)
    m.add_argument("--beta", type=float, default=5.0)
    m.add_argument("--coll", type=int, default=5)
    m.add_argument("--skew", type=float, default=0.0)
    m.add_argument("--blocking", action="store_true",
                   help="every collective's data by blocking calls: two "
                   "MPI_Comm_dup at its first step")
    a = p.parse_args()
    if a.cmd == "summary":
        summary(a.files)
    else:
        model(a)


if __name__ == "__main__":
    sys.exit(main())
