#!/usr/bin/env bash
# `ringflow train --bucket-mb N` and `--comm-dtype` reach the bucketing pass
# (issue 18): the compile's log (RF_LOG=info) names each bucket and the size
# it was filled to - by default the devices' kind's (1 MiB on CPU devices),
# else the one given - --bucket-mb 0 fuses nothing, --comm-dtype bf16 casts
# the bucket for the wire, and in every case the replicas end bit-identical.
# The MLP's gradients in readiness order: b2, W2, b1, W1 (512 KiB), b0, W0
# (1.57 MB, larger than 1 MiB: alone). A tiny data set is made here.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

byte() { printf "\\$(printf %03o "$1")"; }
be32() { byte $(($1 >> 24 & 255)); byte $(($1 >> 16 & 255)); byte $(($1 >> 8 & 255)); byte $(($1 & 255)); }
images() {
  { byte 0; byte 0; byte 8; byte 3; be32 "$2"; be32 28; be32 28
    head -c $(($2 * 784)) /dev/urandom; } | gzip > "$tmp/$1-images-idx3-ubyte.gz"
}
labels() {
  { byte 0; byte 0; byte 8; byte 1; be32 "$2"
    for ((i = 0; i < $2; i++)); do byte $((i % 10)); done; } | gzip > "$tmp/$1-labels-idx1-ubyte.gz"
}
images train 64; labels train 64; images t10k 16; labels t10k 16

# run NAME ARGS...: trains 4 steps on cpu:0-3; stderr (the log) in $tmp/NAME.
run() {
  local name=$1
  shift
  if ! RF_LOG=info "$ringflow" train --data "$tmp" --devices cpu:0-3 --batch 16 \
      --epochs 1 --steps 4 "$@" > "$tmp/$name.out" 2> "$tmp/$name"; then
    echo "$name: ringflow train $* failed"; cat "$tmp/$name.out" "$tmp/$name"; exit 1
  fi
  grep -q "replicas bit-identical" "$tmp/$name.out" ||
    { echo "$name: replicas not bit-identical"; cat "$tmp/$name.out"; exit 1; }
}
# has NAME TEXT / lacks NAME TEXT: the log of run NAME holds TEXT, or not.
has() { grep -qF -- "$2" "$tmp/$1" || { echo "$1: no '$2' in:"; cat "$tmp/$1"; exit 1; }; }
lacks() { ! grep -qF -- "$2" "$tmp/$1" || { echo "$1: '$2' in:"; cat "$tmp/$1"; exit 1; }; }

run default
has default "5 all-reduces (float32, avg) on 4 devices"
has default "buckets of up to 1048576 bytes (the default on CPU devices)"

run mb4 --bucket-mb 4
has mb4 "6 all-reduces (float32, avg) on 4 devices"
has mb4 "buckets of up to 4194304 bytes (collective_bucket_bytes)"

run off --bucket-mb 0
lacks off "#bucket"

run bf16 --comm-dtype bf16
has bf16 "cast to bfloat16 for the wire and back; buckets of up to 1048576 bytes"

# A narrowing --comm-dtype casts the all-reduced gradients, which the other
# --sync modes have none of: a usage error (exit 2), not a flag ignored.
for sync in reduce-broadcast sharded; do
  for t in bf16 fp16; do
    set +e
    "$ringflow" train --data "$tmp" --devices cpu:0-3 --batch 16 --steps 1 \
      --sync "$sync" --comm-dtype "$t" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    set -e
    [ "$rc" = 2 ] || { echo "--sync $sync --comm-dtype $t exited $rc, not 2"; cat "$tmp/err"; exit 1; }
    grep -qF -- "--comm-dtype $t needs --sync allreduce" "$tmp/err" || { cat "$tmp/err"; exit 1; }
  done
  run "fp32_$sync" --sync "$sync" --comm-dtype fp32
done
