#!/usr/bin/env bash
# `ringflow train --load` goes on where the run that saved the checkpoint was
# (docs/CLI.md): --steps K --save, then --load --steps M, ends bit-identical
# to one run of K+M steps (--schedule constant), across an epoch's end, for
# each --sync mode, optimizer and device list form, with the same losses
# and test accuracies printed; --bench from a checkpoint takes the same
# batches. The run restarted at epoch 1's first batch, training those rows
# twice. Also the first line says how many steps the run takes (it said
# "5 epochs" when --steps stopped it after 5 steps), and --save-every's
# notices add no empty lines when stdout is not a terminal. A tiny data set
# (100 training rows: 12 steps of 8 an epoch, 4 rows left over) is made
# here.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp/data" <<'EOF'
import os, random, struct, sys
d = sys.argv[1]
os.makedirs(d)
r = random.Random(5)
for prefix, n in (("train", 100), ("t10k", 37)):
    labels = [r.randrange(10) for _ in range(n)]
    pixels = bytes(min(255, max(0, int(r.gauss(100 + 60 * (k % 10 == l), 40))))
                   for l in labels for k in range(784))
    with open(f"{d}/{prefix}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + pixels)
    with open(f"{d}/{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
EOF

common=(--data "$tmp/data" --batch 8 --epochs 3 --schedule constant)
# the lines a run prints that must agree: each epoch's test accuracy and
# the last step's loss, without times and step counts
lines() {
  grep -E "^epoch [0-9]+: |^epoch [0-9]+ step ([0-9]+)/\1 " "$1" |
    sed -E 's/, [0-9.]+ s$//; s/ [0-9]+ samples\/s.*//; s/step [0-9]+\/[0-9]+ //'
}

# resume WHAT ARGS...: 5 steps, then 9 more from the checkpoint, against 14
resume() {
  local what="$1"
  shift
  "$ringflow" train "${common[@]}" "$@" --quiet --steps 5 --save "$tmp/a.ckpt" > /dev/null
  "$ringflow" train "${common[@]}" "$@" --steps 9 --load "$tmp/a.ckpt" --save "$tmp/b.ckpt" > "$tmp/b.out"
  "$ringflow" train "${common[@]}" "$@" --steps 14 --save "$tmp/c.ckpt" > "$tmp/c.out"
  cmp -s "$tmp/b.ckpt" "$tmp/c.ckpt" || {
    echo "$what: 5 steps, then 9 from the checkpoint, differ from 14 steps"
    cat "$tmp/b.out" "$tmp/c.out"; exit 1
  }
  # the resumed run prints the data's epochs 1 and 2 as the whole run does
  # (its last step's loss, both epochs' test accuracy)
  lines "$tmp/b.out" > "$tmp/b.lines"
  lines "$tmp/c.out" > "$tmp/c.lines"
  grep -q "^epoch 2: test accuracy" "$tmp/b.lines" || { echo "$what: no epoch 2 line"; cat "$tmp/b.out"; exit 1; }
  diff "$tmp/b.lines" "$tmp/c.lines" || { echo "$what: the lines printed differ"; exit 1; }
}
resume "adam, all-reduce" --devices 4
resume "adamw, reduce-broadcast, batches" --devices cpu:0,2 --sync reduce-broadcast \
  --optimizer adamw --feed batches
resume "momentum, sharded, devices out of order" --devices cpu:3,1,0,2 --sync sharded \
  --optimizer momentum
resume "bf16 all-reduce, --save-every" --devices cpu:0-1 --comm-dtype bf16 --save-every 4
resume "the CNN without dropout" --devices 2 --model cnn --dropout 0 --sync sharded

# --bench from the checkpoint takes the batches of steps 6..14 too: its loss
# is the 14th step's
"$ringflow" train "${common[@]}" --quiet --steps 5 --save "$tmp/a.ckpt" > /dev/null
"$ringflow" train "${common[@]}" --steps 14 > "$tmp/c.out"
"$ringflow" train --data "$tmp/data" --batch 8 --load "$tmp/a.ckpt" --bench --warmup 0 \
  --steps 9 > "$tmp/bench.out"
want=$(grep -oE "step 14/14 loss [0-9.]+" "$tmp/c.out" | grep -oE "[0-9.]+$")
grep -q "loss=$want " "$tmp/bench.out" || {
  echo "--bench from the checkpoint: want loss $want"; cat "$tmp/bench.out"; exit 1
}

# the first line: the run's steps
"$ringflow" train --data "$tmp/data" --batch 8 --steps 5 --quiet > "$tmp/out"
head -n 1 "$tmp/out" | grep -q "global batch 8, 5 steps (--steps; 5 epochs are 60)$" || {
  echo "first line with --steps:"; head -n 1 "$tmp/out"; exit 1
}
"$ringflow" train --data "$tmp/data" --batch 8 --epochs 1 --quiet > "$tmp/out"
head -n 1 "$tmp/out" | grep -q "global batch 8, 1 epoch (12 steps)$" || {
  echo "first line with --epochs 1:"; head -n 1 "$tmp/out"; exit 1
}
# not a terminal: no empty lines around the notices
"$ringflow" train --data "$tmp/data" --batch 8 --steps 4 --save "$tmp/a.ckpt" --save-every 2 \
  > "$tmp/out"
grep -q "^saved .* (step 2)$" "$tmp/out"
if grep -q "^$" "$tmp/out"; then echo "an empty line:"; cat "$tmp/out"; exit 1; fi
echo ok
