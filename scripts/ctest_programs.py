"""Prints the programs that some of ctest's tests run, as ninja targets.

Reads `ctest -N --show-only=json-v1` (the tests chosen, e.g. by -L) on
stdin and the add_test lines of BUILD's CTestTestfile.cmake files (ctest
names no program before it is built); every file of a chosen test's command
line under BUILD (the program, or the one tests/mpi/mpirun.sh starts) is
printed relative to BUILD, once. scripts/test.sh --sanitize thread builds
only these.
  ctest --test-dir BUILD -N -L LABEL --show-only=json-v1 |
    python3 scripts/ctest_programs.py BUILD
"""
import json
import os
import re
import sys

build = os.path.realpath(sys.argv[1])
chosen = {t["name"] for t in json.load(sys.stdin).get("tests", [])}
programs = set()
for root, _, files in os.walk(build):
    if "CTestTestfile.cmake" not in files:
        continue
    with open(os.path.join(root, "CTestTestfile.cmake")) as f:
        for line in f:
            m = re.match(r"add_test\(\[=\[(.+?)\]=\] (.*)\)$", line.strip())
            if not m or m.group(1) not in chosen:
                continue
            for arg in re.findall(r'"([^"]*)"', m.group(2)):
                path = os.path.realpath(arg)
                if path.startswith(build + os.sep):
                    programs.add(os.path.relpath(path, build))
if not programs:
    sys.exit("ctest_programs.py: no test program under " + build)
print("\n".join(sorted(programs)))
