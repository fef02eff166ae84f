"""Medians of where a small collective's step goes across processes.

Reads the files that a build with bench/mpi_latprobe.patch applied writes
(RF_LAT=DIR: DIR/lat.PID, one line per rf_session_run that ran a collective
on the direct path: a tag, then clock_gettime marks relative to the run's
start) and prints, per process, collective and size, the median of each
segment in microseconds (docs/PERFORMANCE.md "Session 13: mpilat").

    git apply bench/mpi_latprobe.patch && ninja -C build-nc tools/ringflow
    RF_LAT=/tmp/lat mpirun -np 2 -x RF_LAT build-nc/tools/ringflow bench \
        --min 1K --max 1K --no-gloo --csv
    python3 bench/mpi_latprobe_table.py /tmp/lat
"""

import glob
import statistics
import sys

NAMES = ["all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter"]
# (label, from mark, to mark): marks as numbered in the patch.
SEGMENTS = [
    ("run->group", 0, 1),  # rf_session_run to the group complete here
    ("op_new", 1, 10),
    ("parse_set", 10, 11),
    ("alloc+take", 11, 2),  # step record, buffers, descriptor, entry
    ("check_issue", 2, 3),
    ("prepare", 3, 4),
    ("data_issue", 4, 5),
    ("check_wait", 5, 6),
    ("data_wait", 6, 7),
    ("dones", 7, 8),
    ("to_return", 8, 9),
    ("TOTAL", 0, 9),
]


def main(directory):
    for path in sorted(glob.glob(directory + "/lat.*")):
        rows = {}
        with open(path) as f:
            for line in f:
                v = [int(x) for x in line.split()]
                rows.setdefault(v[0], []).append(v[1:])
        print(path)
        for tag in sorted(rows):
            r = [x for x in rows[tag] if all(x[k] >= 0 for k in range(12))]
            if len(r) < 100:
                continue
            cells = [
                "%s %.2f" % (label, statistics.median(x[b] - x[a] for x in r) / 1000)
                for label, a, b in SEGMENTS
            ]
            name = NAMES[tag // 1000000]
            print("  %-14s %5d B n=%6d | " % (name, tag % 1000000, len(r)) + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1])
