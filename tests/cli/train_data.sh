#!/usr/bin/env bash
# `ringflow train` on data sets that cannot train or test (issue 20, item 5):
# each is an error that says what is wrong, never a run of 0 steps, an
# untrained --save or "test accuracy -nan%". A loss that turns NaN or
# infinite stops the run naming the step, unless --allow-nonfinite. Plain
# (gunzipped) IDX files train; so does --sync sharded with the devices out of
# order, as one device does. The tiny IDX files are made here.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

byte() { printf "\\$(printf %03o "$1")"; }
be32() { byte $(($1 >> 24 & 255)); byte $(($1 >> 16 & 255)); byte $(($1 >> 8 & 255)); byte $(($1 & 255)); }
# images DIR PREFIX N [ROWS [COLS]]: N random ROWS x COLS images (default
# 28x28; COLS defaults to ROWS)
images() {
  local rows="${4:-28}" cols="${5:-${4:-28}}"
  { byte 0; byte 0; byte 8; byte 3; be32 "$3"; be32 "$rows"; be32 "$cols"
    head -c $(($3 * rows * cols)) /dev/urandom; } | gzip > "$1/$2-images-idx3-ubyte.gz"
}
# labels DIR PREFIX N: labels 0, 1, ..., 9, 0, ...
labels() {
  { byte 0; byte 0; byte 8; byte 1; be32 "$3"
    for ((i = 0; i < $3; i++)); do byte $((i % 10)); done; } | gzip > "$1/$2-labels-idx1-ubyte.gz"
}
# dataset NAME TRAIN_ROWS TEST_ROWS [ROWS [COLS]]
dataset() {
  mkdir -p "$tmp/$1"
  images "$tmp/$1" train "$2" "${4:-28}" "${5:-${4:-28}}"; labels "$tmp/$1" train "$2"
  images "$tmp/$1" t10k "$3" "${4:-28}" "${5:-${4:-28}}"; labels "$tmp/$1" t10k "$3"
}
# fails RC WHAT EXPECTED ARGS...: ringflow train ARGS must exit RC (1: an
# error while running; 2: an option the data cannot give), print EXPECTED on
# stderr, and save nothing.
fails() {
  local want="$1" what="$2" expected="$3"
  shift 3
  rm -f "$tmp/out.ckpt"
  local rc=0
  "$ringflow" train --quiet --save "$tmp/out.ckpt" "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "$what: exit $rc, want $want"; cat "$tmp/out" "$tmp/err"; exit 1
  fi
  grep -qF -- "$expected" "$tmp/err" || { echo "$what: no '$expected' in:"; cat "$tmp/err"; exit 1; }
  [ ! -e "$tmp/out.ckpt" ] || { echo "$what: a checkpoint was saved"; exit 1; }
  if grep -q "nan" "$tmp/out"; then echo "$what: printed nan"; cat "$tmp/out"; exit 1; fi
}

dataset small 3 10
fails 2 "a batch larger than the training set" \
  "--batch 4 is more than the 3 training rows" --data "$tmp/small" --devices 1 --batch 4
dataset empty_train 0 10
fails 1 "an empty training set" "holds no images" --data "$tmp/empty_train" --devices 1 --batch 1
dataset empty_test 8 0
fails 1 "an empty test set" "t10k-images-idx3-ubyte.gz holds no images" \
  --data "$tmp/empty_test" --devices 1 --batch 4
dataset small_images 8 4 3
fails 1 "images of the wrong size" "images are 3x3; the model takes 28x28 (784 inputs)" \
  --data "$tmp/small_images" --devices 1 --batch 4
# 784 pixels that are not 28x28 (the CNN would read them as 28x28)
dataset long_images 8 4 16 49
fails 1 "images of 784 pixels, not 28x28" "images are 16x49; the model takes 28x28" \
  --data "$tmp/long_images" --devices 1 --batch 4

# A learning rate that overflows the parameters within a few steps.
dataset ok 64 16
fails 1 "a non-finite loss" "non-finite loss" \
  --data "$tmp/ok" --devices 2 --batch 8 --lr 1e30 --schedule constant --epochs 4
grep -Eq "loss is (nan|-?inf) at step [0-9]+;" "$tmp/err"
# The same run with --allow-nonfinite goes on to the end.
"$ringflow" train --quiet --data "$tmp/ok" --devices 2 --batch 8 --lr 1e30 \
  --schedule constant --epochs 4 --allow-nonfinite > "$tmp/out"
grep -q "^epoch 4: test accuracy" "$tmp/out"
# A sane run on the same data trains every step and saves.
"$ringflow" train --quiet --data "$tmp/ok" --devices 2 --batch 8 --epochs 2 \
  --save "$tmp/ok.ckpt" > "$tmp/out"
grep -q "saved .* (step 16)" "$tmp/out"
# The IDX files gunzipped, under their names without .gz (docs/CLI.md): read
# as they are, one set gzipped and the other not.
mkdir -p "$tmp/plain"
for f in "$tmp/ok"/*.gz; do
  b=$(basename "$f" .gz)
  case "$b" in train-*) gunzip -c "$f" > "$tmp/plain/$b" ;; *) cp "$f" "$tmp/plain/" ;; esac
done
"$ringflow" train --quiet --data "$tmp/plain" --devices 2 --batch 8 --epochs 1 \
  > "$tmp/out" 2> "$tmp/err" || { echo "plain IDX files refused:"; cat "$tmp/err"; exit 1; }
grep -q "^epoch 1: test accuracy" "$tmp/out"
# --sync sharded with the devices listed out of order: ranks follow device
# order, not the list's, and the gathered gradients of small per-device
# batches (up to 16 rows) took the replicas' inputs in list order, so
# cpu:1,0 trained other steps than one device (parameters 4e-3 apart after
# 3 steps). Both gradient paths (4 and 32 rows a device) against --check.
for spec in "cpu:1,0 8" "cpu:3,1,0,2 16" "cpu:1,0 64"; do
  set -- $spec
  "$ringflow" train --quiet --data "$tmp/ok" --devices "$1" --batch "$2" \
    --steps 3 --epochs 1 --sync sharded --check > "$tmp/out"
  diff=$(sed -n 's/.*largest parameter difference \([^ ]*\)$/\1/p' "$tmp/out")
  awk -v d="$diff" 'BEGIN { exit !(d != "" && d + 0 < 1e-5) }' ||
    { echo "--devices $1 --sync sharded differs from one device:"; cat "$tmp/out"; exit 1; }
done
echo "train_data: ok"
