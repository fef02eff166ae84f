#!/usr/bin/env bash
# ringflow train --check at small size, for every --sync mode: the 4-device
# data-parallel run must match one device to float tolerance, and the replicas
# must stay bit-identical. --sync sharded must save the very checkpoint that
# all-reduce saves where it reduce-scatters each device's gradients (32 rows
# per device; at 16 it computes weight gradients from the whole batch, which
# --check covers). Also: --save/--load round trip, a corrupt file,
# --bench's machine-readable line, and batch sizes the data cannot give.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for sync in allreduce reduce-broadcast sharded; do
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
if "$ringflow" train --devices 2 --batch 60002 --steps 1 2> "$tmp/err"; then
  echo "a batch larger than the training set was accepted"; exit 1
fi
grep -q "more than the 60000 training rows" "$tmp/err"
# --devices N is cpu:0..N-1, as in lower and bench
"$ringflow" train --devices 2 --steps 1 --epochs 1 --quiet |
  grep -q "on 2 devices (cpu:0-1)"
for sync in allreduce sharded; do
  "$ringflow" train --steps 20 --batch 128 --sync "$sync" --quiet \
    --save "$tmp/$sync.ckpt" | grep -q "saved"
done
cmp "$tmp/allreduce.ckpt" "$tmp/sharded.ckpt"
"$ringflow" train --devices cpu:0-1 --sync sharded --steps 5 --quiet \
  --load "$tmp/allreduce.ckpt" | grep -q "loaded .* (step 20)"
"$ringflow" train --bench --devices cpu:0-1 --batch 32 --warmup 1 --steps 3 |
  grep -Eq "^samples_per_sec=[0-9.]+ batch=32 devices=2 steps=3 "
if "$ringflow" train --bench --check 2> "$tmp/err"; then
  echo "--bench --check was accepted"; exit 1
fi
grep -q "times training alone" "$tmp/err"
echo "train_check: ok"
