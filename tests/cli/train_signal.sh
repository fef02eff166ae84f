#!/usr/bin/env bash
# SIGINT and SIGTERM stop `ringflow train` between steps (docs/CLI.md): the
# process ends by the signal (exit status 130, 143), its stdout redirected
# to a file keeps every line printed (the whole log was lost in stdio's
# buffer), stderr says where it stopped and which step the --save file
# holds, no temporary checkpoint file is left (a signal during a save left
# a full-size .rf-*.tmp), and the checkpoint loads.
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for sig in INT TERM; do
  d="$tmp/$sig"
  mkdir -p "$d"
  "$ringflow" train --batch 64 --devices 2 --save "$d/c.st" --save-every 1 \
    > "$d/out" 2> "$d/err" &
  pid=$!
  # until it has saved a few times (at most 100 s)
  for _ in $(seq 1000); do
    [ "$(grep -c '^saved ' "$d/out" 2>/dev/null || true)" -ge 3 ] && break
    sleep 0.1
  done
  kill -s "$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
  want=$((128 + $(kill -l "$sig")))
  if [ "$rc" != "$want" ]; then
    echo "SIG$sig: exit $rc, want $want"; cat "$d/err"; exit 1
  fi
  head -1 "$d/out" | grep -q '^ringflow train: MLP' || {
    echo "SIG$sig: no first line"; cat "$d/out"; exit 1; }
  last=$(grep '^saved ' "$d/out" | tail -1 | sed -E 's/.*\(step ([0-9]+)\)$/\1/')
  grep -qE "^ringflow: train: stopped by SIG$sig after [0-9]+ of [0-9]+ steps \(step [0-9]+\); $d/c.st holds step $last\$" "$d/err" || {
    echo "SIG$sig: stderr:"; cat "$d/err"; echo "last saved: $last"; exit 1; }
  if ls -A "$d" | grep -q '^\.rf-'; then
    echo "SIG$sig: a temporary file is left:"; ls -la "$d"; exit 1
  fi
  "$ringflow" train --batch 64 --devices 2 --load "$d/c.st" --steps 1 --quiet \
    > "$d/load" 2>&1 || { echo "SIG$sig: the checkpoint does not load"; cat "$d/load"; exit 1; }
  grep -q "^loaded $d/c.st (step $last)" "$d/load" || {
    echo "SIG$sig: loaded what?"; cat "$d/load"; exit 1; }
done
# Two SIGTERMs, as coreutils' timeout sends them (to the process, then to
# its group): one stop, with its line and the log (the second killed it
# before either was out).
d="$tmp/twice"
mkdir -p "$d"
"$ringflow" train --batch 64 --devices 2 > "$d/out" 2> "$d/err" &
pid=$!
for _ in $(seq 1000); do
  [ -s "$d/out" ] && break
  sleep 0.1
done
sleep 0.5
kill -s TERM "$pid"
kill -s TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 143 ] || { echo "two SIGTERMs: exit $rc, want 143"; cat "$d/err"; exit 1; }
head -1 "$d/out" | grep -q '^ringflow train: MLP' || {
  echo "two SIGTERMs: no first line"; cat "$d/out"; exit 1; }
grep -qE "^ringflow: train: stopped by SIGTERM after [0-9]+ of [0-9]+ steps \(step [0-9]+\); nothing saved\$" "$d/err" || {
  echo "two SIGTERMs: stderr:"; cat "$d/err"; exit 1; }
# --bench stops between steps too, saying so (it was killed mid-step, and
# an ignored SIGINT inherited from a shell's `cmd &` could not stop it).
for sig in INT TERM; do
  d="$tmp/bench$sig"
  mkdir -p "$d"
  (trap '' INT; exec "$ringflow" train --bench --batch 64 --devices 2 --steps 100000 \
    > "$d/out" 2> "$d/err") &
  pid=$!
  sleep 2
  kill -s "$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
  want=$((128 + $(kill -l "$sig")))
  [ "$rc" = "$want" ] || { echo "--bench SIG$sig: exit $rc, want $want"; cat "$d/err"; exit 1; }
  grep -qE "^ringflow: train: stopped by SIG$sig after [0-9]+ of 1000[0-9]+ steps \(--bench: (nothing printed|in the warm-up, nothing timed)\)\$" "$d/err" || {
    echo "--bench SIG$sig: stderr:"; cat "$d/err"; exit 1; }
done
echo "train stops between steps on SIGINT and SIGTERM"
