#!/usr/bin/env bash
# ringflow train --check at small size, for both --sync modes: the 4-device
# data-parallel run must match one device to float tolerance, and the replicas
# must stay bit-identical. Also: --save/--load round trip and a corrupt file.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for sync in allreduce reduce-broadcast; do
  out=$("$ringflow" train --steps 30 --epochs 1 --batch 64 --check --sync "$sync" --quiet)
  echo "$out"
  echo "$out" | grep -q "replicas bit-identical"
  diff=$(echo "$out" | sed -n 's/.*largest parameter difference \([^ ]*\).*/\1/p')
  awk -v d="$diff" 'BEGIN { exit !(d < 1e-4) }' || { echo "difference $diff too large"; exit 1; }
done
"$ringflow" train --steps 20 --epochs 1 --quiet --save "$tmp/a.ckpt" | grep -q "saved"
"$ringflow" train --steps 5 --epochs 1 --quiet --load "$tmp/a.ckpt" | grep -q "loaded .* (step 20)"
head -c 1000 "$tmp/a.ckpt" > "$tmp/cut.ckpt"
if "$ringflow" train --steps 5 --quiet --load "$tmp/cut.ckpt" 2> "$tmp/err"; then
  echo "a truncated checkpoint was accepted"; exit 1
fi
grep -q "corrupt or truncated" "$tmp/err"
if "$ringflow" train --devices cpu:0-3 --batch 30 --steps 1 2> "$tmp/err"; then
  echo "an indivisible batch was accepted"; exit 1
fi
grep -q "not divisible" "$tmp/err"
echo "train_check: ok"
