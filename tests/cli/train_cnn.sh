#!/usr/bin/env bash
# ringflow train --model cnn at small size: for every --sync mode the 4-device
# data-parallel run must match one device to float tolerance with the
# replicas bit-identical; its checkpoint holds the CNN's tensors (OHWI
# filters by default) and loads back (through --bench, which also times it),
# and the MLP refuses it; a --filter-format hwio checkpoint loads only with
# that option, and the error says so; --filter-format without --model cnn
# is a usage error; --model mlp names the default; an unknown model is a
# usage error. --check trains without dropout (one device cannot draw the replicas'
# masks); --bench with it trains other values than without (dropout acts
# while training); --dropout is a usage error outside its range or without
# --model cnn. Few steps and small
# batches: evaluating the test set dominates.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The parameter check runs the convolutions through im2col: after 20 Adam
# steps a rounding-level difference in a near-zero gradient element becomes
# an update difference of up to lr (1e-3), and oneDNN's kernels sum in a
# different order for 4 images a block than for 16 (measured: parameters
# 4.8e-7 apart after 1 step, 3.5e-6 after 12, 1.0e-3 after 20; im2col 2.9e-7
# after 20). oneDNN's path is checked below on the loss and the replicas.
for sync in allreduce reduce-broadcast sharded; do
  out=$(RF_CPU_CONV=im2col "$ringflow" train --model cnn --devices cpu:0-3 --steps 20 --epochs 1 \
    --batch 32 --check --sync "$sync" --quiet --save "$tmp/$sync.ckpt")
  echo "$out"
  grep -q "CNN 28x28x1-c32-p-c64-p-1024-10 on 4 devices" <<< "$out"
  grep -q "replicas bit-identical" <<< "$out"
  # The loss to 1e-4; the parameters to 5 updates of lr: on a CPU without
  # AVX-512 (session 14) OpenBLAS's AVX2 sgemm sums a 4-device step's
  # products (8 images) in another order than one device's (32), and even
  # im2col's parameters ended 1.04e-3 apart (loss 1.8e-5); a wrong gradient
  # sync is off by far more, and the replicas are checked bit-identical.
  loss=$(echo "$out" | sed -n 's/.*largest loss difference \([^,]*\),.*/\1/p')
  awk -v d="$loss" 'BEGIN { exit !(d != "" && d < 1e-4) }' ||
    { echo "loss difference '$loss' too large"; exit 1; }
  diff=$(echo "$out" | sed -n 's/.*largest parameter difference \([^ ]*\).*/\1/p')
  awk -v d="$diff" 'BEGIN { exit !(d != "" && d < 5e-3) }' ||
    { echo "difference '$diff' too large"; exit 1; }
done
out=$("$ringflow" train --model cnn --devices cpu:0-3 --steps 20 --epochs 1 \
  --batch 32 --check --quiet)
echo "$out"
grep -q "replicas bit-identical" <<< "$out"
diff=$(echo "$out" | sed -n 's/.*largest loss difference \([^,]*\),.*/\1/p')
awk -v d="$diff" 'BEGIN { exit !(d != "" && d < 1e-4) }' ||
  { echo "oneDNN: loss difference '$diff' too large"; exit 1; }
# --conv-epilogues all: both conv blocks fused (on CPU the unfused kernels
# nested), the replicas still bit-identical and the check within tolerance.
out=$(RF_LOG=info "$ringflow" train --model cnn --devices cpu:0-1 --steps 5 \
  --epochs 1 --batch 32 --check --quiet --conv-epilogues all 2>&1)
grep -q "replicas bit-identical" <<< "$out"
[ "$(echo "$out" | grep -c "BiasAdd + Relu on cpu:0 as one _FusedConv2DBiasRelu")" -ge 2 ] ||
  { echo "--conv-epilogues all fused fewer than 2 conv blocks"; exit 1; }
# the checkpoint: the CNN's parameters and both Adam moments, by shape
python3 - "$tmp/allreduce.ckpt" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
want = {"W0": [32, 5, 5, 1], "b0": [32], "W1": [64, 5, 5, 32], "b1": [64],
        "W2": [3136, 1024], "b2": [1024], "W3": [1024, 10], "b3": [10]}
for k in ("", "m_", "v_"):
    for name, shape in want.items():
        got = h[k + name]
        assert got["dtype"] == "F32" and got["shape"] == shape, (k + name, got)
assert len(h) == 25, sorted(h)  # 24 tensors and __metadata__
assert h["__metadata__"]["ringflow.step"] == "20", h["__metadata__"]
PY
"$ringflow" train --model cnn --devices cpu:0-1 --bench --warmup 0 --steps 1 \
  --batch 16 --load "$tmp/allreduce.ckpt" > "$tmp/out"
grep -q "loaded .* (step 20)" "$tmp/out"
grep -Eq "^samples_per_sec=[0-9.]+ batch=16 devices=2 steps=1 " "$tmp/out"
if "$ringflow" train --steps 1 --quiet --load "$tmp/allreduce.ckpt" 2> "$tmp/err"; then
  echo "the MLP loaded a CNN checkpoint"; exit 1
fi
grep -q "ckpt: holds 24 tensors; this model (--model mlp, --optimizer adam) has 18 (the file holds 'W3'): a checkpoint of another --model or --optimizer?" "$tmp/err"
if grep -q "ckpt: .*ckpt" "$tmp/err"; then echo "the path twice"; exit 1; fi
# HWIO filters: their own shapes; the default (OHWI) refuses them and names
# the option that loads them
"$ringflow" train --model cnn --devices cpu:0 --steps 1 --epochs 1 --batch 8 \
  --quiet --filter-format hwio --save "$tmp/hwio.ckpt" > /dev/null
python3 - "$tmp/hwio.ckpt" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert h["W0"]["shape"] == [5, 5, 1, 32] and h["W1"]["shape"] == [5, 5, 32, 64], h
PY
if "$ringflow" train --model cnn --devices cpu:0 --steps 1 --quiet \
  --load "$tmp/hwio.ckpt" 2> "$tmp/err"; then
  echo "an HWIO checkpoint loaded into OHWI filters"; exit 1
fi
grep -q "expected float32 \[32,5,5,1\]; its convolution filters are in the other layout: load it with --filter-format hwio" "$tmp/err" ||
  { cat "$tmp/err"; exit 1; }
"$ringflow" train --model cnn --devices cpu:0 --bench --warmup 0 --steps 1 \
  --batch 8 --filter-format hwio --load "$tmp/hwio.ckpt" > "$tmp/out"
grep -q "loaded .* (step 1)" "$tmp/out"
if "$ringflow" train --filter-format ohwi --steps 1 2> "$tmp/err"; then
  echo "--filter-format without --model cnn ran"; exit 1
fi
grep -q -- "--filter-format needs --model cnn" "$tmp/err"
# options of another mode are usage errors (exit 2), never ignored
mode_error() { # expected message, then the options
  local want="$1" rc
  shift
  set +e
  "$ringflow" train --steps 1 "$@" 2> "$tmp/err"
  rc=$?
  set -e
  [ "$rc" = 2 ] || { echo "$* exited $rc, not 2"; exit 1; }
  grep -q -- "$want" "$tmp/err" || { cat "$tmp/err"; exit 1; }
}
mode_error "--conv-epilogues needs --model cnn" --conv-epilogues all
mode_error "--warmup needs --bench" --model cnn --warmup 2
mode_error "no --dropout above 0" --model cnn --check --dropout 0.5
for rate in 0 0.5; do
  "$ringflow" train --model cnn --devices cpu:0-1 --bench --warmup 0 --steps 3 \
    --batch 16 --dropout "$rate" > "$tmp/drop$rate"
done
loss0=$(sed -n 's/.* loss=\([^ ]*\).*/\1/p' "$tmp/drop0")
loss5=$(sed -n 's/.* loss=\([^ ]*\).*/\1/p' "$tmp/drop0.5")
[ -n "$loss0" ] && [ -n "$loss5" ] && [ "$loss0" != "$loss5" ] ||
  { echo "dropout changed nothing: loss '$loss0' and '$loss5'"; exit 1; }
set +e
"$ringflow" train --model cnn --dropout 1 --steps 1 2> "$tmp/err"
rc1=$?
"$ringflow" train --dropout 0.5 --steps 1 2>> "$tmp/err"
rc2=$?
set -e
[ "$rc1" = 2 ] && [ "$rc2" = 2 ] || { echo "exit $rc1 $rc2, not 2"; exit 1; }
grep -q "\-\-dropout '1': out of range" "$tmp/err"
grep -q "\-\-dropout needs \-\-model cnn" "$tmp/err"
"$ringflow" train --model mlp --devices 2 --steps 1 --epochs 1 --quiet |
  grep -q "MLP 784-512-256-10 on 2 devices"
set +e
"$ringflow" train --model bogus --steps 1 2> "$tmp/err"
rc=$?
set -e
[ "$rc" = 2 ] || { echo "--model bogus exited $rc, not 2"; exit 1; }
grep -q "\-\-model 'bogus': not one of the choices; allowed: mlp or cnn" "$tmp/err"
echo "train_cnn: ok"
