#!/usr/bin/env bash
# `ringflow train --comm-dtype` narrows the gradients' all-reduces only, as
# its --help says: the loss a job of several processes averages across them
# (and the parameter spread it checks) stays float32, so the first step's
# loss - computed before any update - is the same with bf16, fp16 and fp32.
# A narrowing --comm-dtype without --sync allreduce (no gradient all-reduce
# to narrow) is a usage error. A tiny data set is made here.
set -euo pipefail
ringflow="$1"
mpirun_sh="$(dirname "$0")/../mpi/mpirun.sh"
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

for sync in sharded reduce-broadcast; do
  for t in bf16 fp16; do
    rc=0
    "$ringflow" train --data "$tmp" --steps 1 --batch 16 --sync "$sync" \
      --comm-dtype "$t" > /dev/null 2> "$tmp/err" || rc=$?
    [ "$rc" -eq 2 ] || { echo "--sync $sync --comm-dtype $t: exit $rc, not 2"; cat "$tmp/err"; exit 1; }
    grep -q -- "--comm-dtype $t needs --sync allreduce" "$tmp/err" ||
      { echo "--sync $sync --comm-dtype $t:"; cat "$tmp/err"; exit 1; }
  done
  "$ringflow" train --data "$tmp" --steps 1 --batch 16 --sync "$sync" \
    --comm-dtype fp32 --quiet > /dev/null
done

# loss T: the first step's loss of 2 processes x 1 device with --comm-dtype T
loss() {
  local out
  out=$(bash "$mpirun_sh" 2 "$ringflow" train --data "$tmp" --devices 1 \
          --steps 1 --batch 16 --comm-dtype "$1" 2>&1) ||
    { echo "--comm-dtype $1 failed: $out" >&2; exit 1; }
  if grep -q "MPI tests skipped" <<< "$out"; then echo skipped; return; fi
  echo "$out" | grep -o "loss [0-9.]*" | tail -1
}
want=$(loss fp32)
if [ "$want" = skipped ]; then echo "MPI tests skipped: mpirun not found"; exit 0; fi
[ -n "$want" ] || { echo "no loss printed"; exit 1; }
for t in bf16 fp16; do
  got=$(loss "$t")
  [ "$got" = "$want" ] || { echo "--comm-dtype $t: $got, fp32: $want"; exit 1; }
done
echo "train_comm_dtype: ok ($want)"
