#!/usr/bin/env bash
# ringflow train --optimizer adam|adamw|momentum at small size: for each, with
# --sync allreduce and sharded, the 4-device run matches one device to float
# tolerance with the replicas bit-identical; its checkpoint holds the
# optimizer's slots (m_ and v_, or accum_) and training resumes from it;
# --optimizer adam is the default's very checkpoint; AdamW resumes from Adam's
# (the same slots), momentum refuses it; options of another optimizer and
# out-of-range values are usage errors.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# has PATTERN: a line of stdin matches. It reads all of stdin: `cmd | grep -q`
# stops at the match, and under pipefail cmd's SIGPIPE would fail the test.
has() { local all; all=$(cat); grep -q -- "$1" <<< "$all"; }
# ringflow train with these options, its stdout on ours; a failure prints
# its stderr and exit status (a crash inside $(...) would print nothing)
train() {
  local rc=0
  "$ringflow" train "$@" 2> "$tmp/train_err" || rc=$?
  if [ "$rc" != 0 ]; then
    cat "$tmp/train_err" >&2
    echo "ringflow train $*: exit status $rc" >&2
    return 1
  fi
}
for opt in adam adamw momentum; do
  # momentum's default lr (0.1) is 100x Adam's: so are the rounding
  # differences its steps carry from the 4-device sums to the parameters
  tol=1e-4
  [ "$opt" = momentum ] && tol=1e-3
  for sync in allreduce sharded; do
    out=$(train --optimizer "$opt" --sync "$sync" --steps 10 --epochs 1 \
      --batch 128 --check --quiet --save "$tmp/$opt-$sync.ckpt")
    echo "$out"
    grep -q "replicas bit-identical" <<< "$out"
    diff=$(echo "$out" | sed -n 's/.*largest parameter difference \([^ ]*\).*/\1/p')
    awk -v d="$diff" -v t="$tol" 'BEGIN { exit !(d != "" && d < t) }' ||
      { echo "$opt $sync: difference '$diff' too large"; exit 1; }
  done
  # sharded slots are all-gathered into the same checkpoint (32 rows per
  # device: the same arithmetic as all-reduce's, see train_check.sh)
  cmp "$tmp/$opt-allreduce.ckpt" "$tmp/$opt-sharded.ckpt" ||
    { echo "$opt: sharded and all-reduce checkpoints differ"; exit 1; }
  out=$(train --optimizer "$opt" --steps 5 --epochs 1 --batch 128 \
    --quiet --load "$tmp/$opt-allreduce.ckpt" --save "$tmp/$opt-resumed.ckpt")
  grep -q "loaded .* (step 10)" <<< "$out"
  grep -q "saved .* (step 15)" <<< "$out"
done
python3 - "$tmp" <<'PY'
import json, struct, sys
def header(path):
    b = open(path, "rb").read()
    return json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
params = {"W0": [784, 512], "b0": [512], "W1": [512, 256], "b1": [256],
          "W2": [256, 10], "b2": [10]}
slots = {"adam": ("m_", "v_"), "adamw": ("m_", "v_"), "momentum": ("accum_",)}
for opt, prefixes in slots.items():
    for ckpt in ("allreduce", "resumed"):
        h = header(f"{sys.argv[1]}/{opt}-{ckpt}.ckpt")
        for k in ("",) + prefixes:
            for name, shape in params.items():
                got = h[k + name]
                assert got["shape"] == shape, (opt, k + name, got)
        assert len(h) == 6 * (1 + len(prefixes)) + 1, (opt, sorted(h))
PY
# the default is Adam, unchanged
"$ringflow" train --steps 10 --epochs 1 --batch 128 --quiet \
  --save "$tmp/default.ckpt" > /dev/null
cmp "$tmp/default.ckpt" "$tmp/adam-allreduce.ckpt"
# AdamW goes on from Adam's state; momentum has other slots
"$ringflow" train --optimizer adamw --steps 1 --epochs 1 --quiet \
  --load "$tmp/adam-allreduce.ckpt" | has "loaded .* (step 10)"
if "$ringflow" train --optimizer momentum --steps 1 --quiet \
  --load "$tmp/adam-allreduce.ckpt" 2> "$tmp/err"; then
  echo "momentum loaded Adam's checkpoint"; exit 1
fi
grep -q "holds 18 tensors; this model (--model mlp, --optimizer momentum) has 12 (the file holds 'm_W0')" "$tmp/err"
usage() { # expected message, then the options
  local want="$1" rc
  shift
  set +e
  "$ringflow" train --steps 1 "$@" 2> "$tmp/err"
  rc=$?
  set -e
  [ "$rc" = 2 ] || { echo "$* exited $rc, not 2"; exit 1; }
  grep -q -- "$want" "$tmp/err" || { cat "$tmp/err"; exit 1; }
}
usage "--weight-decay needs --optimizer adamw" --weight-decay 0.1
usage "--momentum needs --optimizer momentum" --optimizer adamw --momentum 0.5
usage "allowed: adam, adamw or momentum" --optimizer sgd
usage "--momentum '1.5': out of range" --optimizer momentum --momentum 1.5
usage "allowed: a finite number >= 0" --optimizer adamw --weight-decay -1
# the ends of the ranges: plain SGD, AdamW without decay
"$ringflow" train --optimizer momentum --momentum 0 --steps 2 --epochs 1 \
  --quiet | has "replicas bit-identical"
"$ringflow" train --optimizer adamw --weight-decay 0 --steps 2 --epochs 1 \
  --quiet | has "replicas bit-identical"
echo "train_optimizers: ok"
