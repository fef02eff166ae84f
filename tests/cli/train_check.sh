#!/usr/bin/env bash
# ringflow train --check at small size, for every --sync mode: the 4-device
# data-parallel run must match one device to float tolerance, and the replicas
# must stay bit-identical. --sync sharded must save the very checkpoint that
# all-reduce saves where it reduce-scatters each device's gradients (32 rows
# per device; at 16 it computes weight gradients from the whole batch, which
# --check covers). Also: --tf32 (no change on CPU devices), --save/--load
# round trip, --save-every, the save
# path checked at start-up, corrupt files and states training cannot go on
# from (NaN, infinite, negative second moments, bad steps),
# --bench's machine-readable line, and batch sizes the data cannot give.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# has PATTERN: a line of stdin matches. It reads all of stdin: `cmd | grep -q`
# stops at the match, and under pipefail cmd's SIGPIPE would fail the test.
has() { local all; all=$(cat); grep -q -- "$1" <<< "$all"; }
for sync in allreduce reduce-broadcast sharded; do
  out=$("$ringflow" train --steps 30 --epochs 1 --batch 64 --check --sync "$sync" --quiet)
  echo "$out"
  grep -q "replicas bit-identical" <<< "$out"
  diff=$(echo "$out" | sed -n 's/.*largest parameter difference \([^ ]*\).*/\1/p')
  awk -v d="$diff" 'BEGIN { exit !(d < 1e-4) }' || { echo "difference $diff too large"; exit 1; }
done
"$ringflow" train --steps 20 --epochs 1 --quiet --save "$tmp/a.ckpt" | has "saved"
out=$("$ringflow" train --steps 5 --epochs 1 --quiet --load "$tmp/a.ckpt")
has "loaded .* (step 20)" <<< "$out"
# the summary is the first line (CLI.md), before --load's and --graph-dir's
head -1 <<< "$out" | grep -q "^ringflow train: MLP" || { echo "$out"; exit 1; }
out=$("$ringflow" train --steps 1 --epochs 1 --load "$tmp/a.ckpt" --graph-dir "$tmp/graphs")
head -1 <<< "$out" | grep -q "^ringflow train: MLP" || { echo "$out"; exit 1; }
head -c 1000 "$tmp/a.ckpt" > "$tmp/cut.ckpt"
if "$ringflow" train --steps 5 --quiet --load "$tmp/cut.ckpt" 2> "$tmp/err"; then
  echo "a truncated checkpoint was accepted"; exit 1
fi
grep -q "DATA_LOSS" "$tmp/err"
# --save-every: a checkpoint every N steps and at the end, each one whole
out=$("$ringflow" train --steps 12 --epochs 1 --save "$tmp/e.ckpt" --save-every 5)
for s in 5 10 12; do
  grep -q "saved $tmp/e.ckpt (step $s)" <<< "$out" || { echo "no save at step $s"; exit 1; }
done
"$ringflow" train --steps 1 --epochs 1 --quiet --load "$tmp/e.ckpt" | has "loaded .* (step 12)"
# the save path is checked before training starts
for bad in "$tmp/missing/x.ckpt" "$tmp"; do
  if "$ringflow" train --steps 5 --save "$bad" > "$tmp/out" 2> "$tmp/err"; then
    echo "--save $bad was accepted"; exit 1
  fi
  if grep -q "epoch" "$tmp/out"; then echo "trained before failing to save"; exit 1; fi
done
if "$ringflow" train --steps 2 --save-every 1 2> "$tmp/err"; then
  echo "--save-every without --save was accepted"; exit 1
fi
grep -q "needs --save" "$tmp/err"
# checkpoints with a valid CRC but a state training cannot go on from
edit() { # edit SRC DST TENSOR INDEX VALUE [STEP]: one float32 set, CRC redone
  python3 - "$@" <<'PY'
import json, struct, sys, zlib
src, dst, name, i, value = sys.argv[1:6]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
at = 8 + n + h[name]["data_offsets"][0] + 4 * int(i)
b[at:at + 4] = struct.pack("<f", float(value))
h["__metadata__"]["ringflow.crc32"] = "%08x" % zlib.crc32(bytes(b[8 + n:]))
if len(sys.argv) > 6:
    h["__metadata__"]["ringflow.step"] = sys.argv[6]
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(dst, "wb").write(struct.pack("<Q", len(t)) + t + bytes(b[8 + n:]))
PY
}
expect_load_error() { # FILE MESSAGE
  if "$ringflow" train --steps 1 --quiet --load "$1" 2> "$tmp/err"; then
    echo "$1 was accepted"; exit 1
  fi
  grep -qF "$2" "$tmp/err" || { echo "want '$2', got:"; cat "$tmp/err"; exit 1; }
}
edit "$tmp/a.ckpt" "$tmp/ok.ckpt" W0 0 0.5
"$ringflow" train --steps 1 --epochs 1 --quiet --load "$tmp/ok.ckpt" | has "loaded"
edit "$tmp/a.ckpt" "$tmp/nan.ckpt" W1 7 nan
expect_load_error "$tmp/nan.ckpt" "tensor 'W1' element 7 is nan"
edit "$tmp/a.ckpt" "$tmp/inf.ckpt" m_b0 3 -inf
expect_load_error "$tmp/inf.ckpt" "tensor 'm_b0' element 3 is -inf"
edit "$tmp/a.ckpt" "$tmp/negv.ckpt" v_W2 11 -0.5
expect_load_error "$tmp/negv.ckpt" "tensor 'v_W2' element 11 is -0.5; expected >= 0"
edit "$tmp/a.ckpt" "$tmp/s1.ckpt" W0 0 0.5 -5
expect_load_error "$tmp/s1.ckpt" "step '-5' is not an integer"
edit "$tmp/a.ckpt" "$tmp/s2.ckpt" W0 0 0.5 9223372036854775807
expect_load_error "$tmp/s2.ckpt" "step '9223372036854775807' is not an integer"
expect_load_error /dev/zero "not a regular file"
printf 'RFCKPT\0\001\001\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' > "$tmp/old.ckpt"
expect_load_error "$tmp/old.ckpt" "ringflow's old format"
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
    --save "$tmp/$sync.ckpt" | has "saved"
done
cmp "$tmp/allreduce.ckpt" "$tmp/sharded.ckpt"
# --tf32 changes nothing on CPU devices: the same checkpoint, bit for bit
"$ringflow" train --steps 20 --batch 128 --quiet --tf32 \
  --save "$tmp/tf32.ckpt" | has "saved"
cmp "$tmp/allreduce.ckpt" "$tmp/tf32.ckpt"
"$ringflow" train --devices cpu:0-1 --sync sharded --steps 5 --quiet \
  --load "$tmp/allreduce.ckpt" | has "loaded .* (step 20)"
"$ringflow" train --bench --devices cpu:0-1 --batch 32 --warmup 1 --steps 3 |
  grep -Eq "^samples_per_sec=[0-9.]+ batch=32 devices=2 steps=3 "
if "$ringflow" train --bench --check 2> "$tmp/err"; then
  echo "--bench --check was accepted"; exit 1
fi
grep -q "times training alone" "$tmp/err"
# --graph-dir writes its graphs; its "wrote" notices go with --quiet (they
# came before the first line)
"$ringflow" train --steps 1 --batch 32 --quiet --graph-dir "$tmp/g" > "$tmp/q"
[ -s "$tmp/g/train_before_lowering.dot" ] && [ -s "$tmp/g/train_after_lowering.dot" ]
if grep -q "^wrote " "$tmp/q"; then echo "--quiet printed:"; cat "$tmp/q"; exit 1; fi
head -1 "$tmp/q" | grep -q "^ringflow train: "
"$ringflow" train --steps 1 --batch 32 --graph-dir "$tmp/g2" |
  has "^wrote .*/train_after_lowering.dot"
echo "train_check: ok"
