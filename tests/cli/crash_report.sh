#!/usr/bin/env bash
# A fatal signal in `ringflow train`: stderr names it and shows a backtrace,
# and the process dies of that signal (exit status 128 + its number).
set -euo pipefail
ringflow="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for sig in SEGV BUS FPE ILL ABRT; do
  "$ringflow" train --steps 1000000 --epochs 1000 --quiet \
    > /dev/null 2> "$tmp/err" &
  pid=$!
  # the handler is installed first thing in main; wait until training runs
  for _ in $(seq 100); do
    [ -e "/proc/$pid/task" ] && [ "$(ls "/proc/$pid/task" | wc -l)" -gt 1 ] &&
      break
    sleep 0.1
  done
  kill -s "$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
  num=$(kill -l "$sig")
  [ "$rc" = $((128 + num)) ] ||
    { echo "SIG$sig: exit status $rc, not $((128 + num))"; cat "$tmp/err"; exit 1; }
  grep -q "^ringflow: crashed with SIG$sig; backtrace" "$tmp/err" ||
    { echo "SIG$sig: no report"; cat "$tmp/err"; exit 1; }
  # at least the handler's own frame and main's caller are listed
  [ "$(grep -c '\[0x[0-9a-f]*\]$' "$tmp/err")" -ge 2 ] ||
    { echo "SIG$sig: no backtrace"; cat "$tmp/err"; exit 1; }
done
echo "crash_report: ok"
