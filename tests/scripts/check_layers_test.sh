#!/usr/bin/env bash
# The layer check (scripts/check_layers.sh) against its own table: the tree
# passes, and a copy of the table with files that break it fails, naming the
# file, the line and the rule.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
check="$repo/scripts/check_layers.sh"
fail() { echo "FAIL: $*"; exit 1; }

bash "$check" "$repo" >/dev/null || fail "the repository breaks its own layer table"

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs" "$tmp/src/kernels/cpu" "$tmp/src/core" "$tmp/src/graph" \
  "$tmp/include/ringflow" "$tmp/examples"
cp "$repo/docs/ARCHITECTURE.md" "$tmp/docs/"
# Allowed: own layer, a lower layer, a public header, a named single header.
printf '#include "core/status.h"\n#include "ringflow/tensor.h"\n' >"$tmp/src/core/ok.c"
printf '#include "ops/op_registry.h"\n#include "core/mem.h"\n' >"$tmp/src/graph/ok.c"
printf '#include "device/device.h"\n#include "comm/collective.h"\n' >"$tmp/src/kernels/cpu/ok.c"
bash "$check" "$tmp" >/dev/null || fail "allowed includes were refused"

# Upward includes, one per kind of rule.
printf '#include "core/mem.h"\n#include "passes/lower_collectives.h"\n' >"$tmp/src/kernels/cpu/up.c"
printf '#include "graph/graph.h"\n' >"$tmp/src/core/up.c"
printf '#include "ops/math_ops.h"\n' >"$tmp/src/graph/up.c"
printf '#include "core/status.h"\n' >"$tmp/include/ringflow/up.h"
printf '#include "runtime/session_internal.h"\n' >"$tmp/examples/up.c"
if out=$(bash "$check" "$tmp"); then fail "violations passed: $out"; fi
for want in \
  'src/kernels/cpu/up.c:2: includes "passes/lower_collectives.h": layer '"'"'kernels'"'"' may include' \
  'src/core/up.c:1: includes "graph/graph.h": layer '"'"'core'"'"' may include only itself' \
  'src/graph/up.c:1: includes "ops/math_ops.h"' \
  'include/ringflow/up.h:1: includes "core/status.h": may include only the public headers' \
  'examples/up.c:1: includes "runtime/session_internal.h"' \
  'layers: 5 violation(s)'; do
  grep -qF "$want" <<<"$out" || fail "missing: $want
got:
$out"
done
echo "1 passed, 0 failed"
