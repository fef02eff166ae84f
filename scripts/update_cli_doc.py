#!/usr/bin/env python3
"""Rewrites every `$ ringflow ... --help` block of docs/CLI.md with what the
built tool prints now (test_cli_options checks they match byte for byte).
  scripts/update_cli_doc.py [RINGFLOW_BINARY (default build-nc/tools/ringflow)]
"""
import re
import subprocess
import sys

binary = sys.argv[1] if len(sys.argv) > 1 else "build-nc/tools/ringflow"
path = "docs/CLI.md"
text = open(path).read()


def block(m):
    args = m.group(1).split()
    out = subprocess.run([binary] + args, capture_output=True, text=True)
    return f"```text\n$ ringflow {m.group(1)}\n{out.stdout}{out.stderr}```"


new = re.sub(r"```text\n\$ ringflow ((?:\S+ )*--help)\n.*?```", block, text,
             flags=re.S)
if new != text:
    open(path, "w").write(new)
    print(f"{path}: help blocks updated")
