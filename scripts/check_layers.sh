#!/usr/bin/env bash
# Checks every #include in src/, include/ and examples/ against the layer
# table in docs/ARCHITECTURE.md ("## Layers"): a file may include its own
# layer, the public headers (ringflow/...) and what its row's last column
# names (whole layers like `core`, or single headers like `ops/op_registry.h`).
# The table is the rule: this script has no list of its own. Prints one line
# per violation (file:line: the include, and what the rule allows) and exits 1;
# exits 0 with a summary when there is none.
#   scripts/check_layers.sh [ROOT]     (ROOT defaults to the repository)
set -euo pipefail
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
exec python3 - "$root" <<'PY'
import os, re, sys

root = sys.argv[1]
doc = os.path.join(root, "docs", "ARCHITECTURE.md")
text = open(doc, encoding="utf-8").read()
m = re.search(r"^## Layers\n(.*?)(?=^## )", text, re.S | re.M)
if not m:
    sys.exit(f"{doc}: no '## Layers' section")

# folder -> (layer name, allowed layers, allowed single headers)
rules = {}
for line in m.group(1).splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 3 or not re.fullmatch(r"`[a-z_/]+/`", cells[0]):
        continue
    folder = cells[0].strip("`")
    allowed = re.findall(r"`([^`]+)`", cells[-1])
    layers = {a.rstrip("/") for a in allowed if not a.endswith((".h", ".cuh"))}
    headers = {a for a in allowed if a.endswith((".h", ".cuh"))}
    rules[folder] = (layers, headers)
if not rules:
    sys.exit(f"{doc}: the '## Layers' table has no rows")

def layer_of(rel):
    """The table row a file falls under (the longest folder prefix)."""
    best = None
    for folder in rules:
        if rel.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best

def src_layer(folder):
    return folder[len("src/"):].rstrip("/") if folder.startswith("src/") else None

known_layers = {src_layer(f) for f in rules if src_layer(f)}
include_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
violations, checked = [], 0
for top in ("src", "include", "examples"):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for name in sorted(files):
            if not name.endswith((".c", ".h", ".cu", ".cuh", ".cc", ".cpp")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            folder = layer_of(rel)
            if folder is None:
                violations.append(f"{rel}: no row of the layer table covers this file")
                continue
            layers, headers = rules[folder]
            own = src_layer(folder)
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    im = include_re.match(line)
                    if not im:
                        continue
                    inc = im.group(1)
                    checked += 1
                    if "/" not in inc and os.path.exists(os.path.join(dirpath, inc)):
                        continue  # beside the file: its own layer
                    first = inc.split("/", 1)[0]
                    if first == "ringflow":
                        continue  # the public API, open to everyone
                    if first == own or first in layers or inc in headers:
                        continue
                    if folder == "include/ringflow/" or own is None:
                        rule = "may include only the public headers (ringflow/...)"
                    else:
                        allowed = sorted(layers) + sorted(headers)
                        rule = (f"layer '{own}' may include "
                                f"{', '.join(allowed) if allowed else 'only itself'}")
                        if first not in known_layers:
                            rule += f"; '{first}' is no layer of the table"
                    violations.append(f"{rel}:{lineno}: includes \"{inc}\": {rule} "
                                      "(docs/ARCHITECTURE.md, Layers)")
for v in violations:
    print(v)
if violations:
    print(f"layers: {len(violations)} violation(s) of docs/ARCHITECTURE.md's table")
    sys.exit(1)
print(f"layers: {checked} includes in src/, include/ and examples/ keep "
      f"docs/ARCHITECTURE.md's table ({len(rules)} rows)")
PY
