#!/usr/bin/env python3
"""Tables from a bench/cupti_trace.c CSV: where a GPU's time goes between
the kernels.

  python3 bench/cupti_trace_table.py trace.csv[.gz] [--match SUBSTRING] [--top N]

For each launch group (a CUDA graph's replays, grouped by graph id; work
launched outside graphs, grouped by stream) it prints:
  - per replay (graphs): records, span (first start to last end), busy (the
    union of the records' intervals) and idle (span - busy), medians over
    the replays;
  - per record name: count, median duration, and the median gap before it
    (its start minus the previous record's end in the same replay or
    stream; concurrent records give negative gaps, shown as 0).
--match keeps only records whose name contains SUBSTRING (and the gaps are
then between matching records). Times in microseconds.
"""
import argparse
import csv
import gzip
import statistics
from collections import defaultdict


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def busy(recs):
    total, cur_s, cur_e = 0, None, None
    for r in sorted(recs, key=lambda r: r["start"]):
        if cur_e is None or r["start"] > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = r["start"], r["end"]
        else:
            cur_e = max(cur_e, r["end"])
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def short(name, width=70):
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--match", default="")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    recs = []
    opener = gzip.open if a.csv.endswith(".gz") else open
    with opener(a.csv, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if a.match and a.match not in row["name"]:
                continue
            for k in ("start", "end", "bytes", "stream", "graph", "correlation"):
                row[k] = int(row[k])
            recs.append(row)
    groups = defaultdict(list)
    for r in recs:
        key = ("graph", r["graph"]) if r["graph"] else ("stream", r["stream"])
        groups[key].append(r)
    for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        # One replay: a graph's records of one launch (one correlation id);
        # outside graphs the whole stream is one sequence.
        seqs = defaultdict(list)
        for r in rs:
            seqs[r["correlation"] if key[0] == "graph" else 0].append(r)
        print(f"== {key[0]} {key[1]}: {len(rs)} records, {len(seqs)} "
              f"{'replays' if key[0] == 'graph' else 'sequence'}")
        if key[0] == "graph":
            spans = [max(r["end"] for r in s) - min(r["start"] for r in s)
                     for s in seqs.values()]
            busys = [busy(s) for s in seqs.values()]
            counts = [len(s) for s in seqs.values()]
            print(f"   per replay: records {med(counts):.0f}, span "
                  f"{med(spans) / 1e3:.1f}, busy {med(busys) / 1e3:.1f}, idle "
                  f"{med([s - b for s, b in zip(spans, busys)]) / 1e3:.1f}")
        durs, gaps = defaultdict(list), defaultdict(list)
        for s in seqs.values():
            s.sort(key=lambda r: r["start"])
            prev_end = None
            for r in s:
                durs[r["name"]].append(r["end"] - r["start"])
                if prev_end is not None:
                    gaps[r["name"]].append(max(0, r["start"] - prev_end))
                prev_end = r["end"] if prev_end is None else max(prev_end,
                                                                 r["end"])
        names = sorted(durs, key=lambda n: -sum(durs[n]))[: a.top]
        print(f"   {'count':>6} {'median':>9} {'gap before':>10}  name")
        for n in names:
            print(f"   {len(durs[n]):>6} {med(durs[n]) / 1e3:>9.2f} "
                  f"{med(gaps[n]) / 1e3:>10.2f}  {short(n)}")


if __name__ == "__main__":
    main()
