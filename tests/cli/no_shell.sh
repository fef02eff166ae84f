#!/usr/bin/env bash
# No shell runs a path the user gave (issue 20, item 4): `ringflow lower
# --dot DIR` with shell syntax in DIR writes DIR/before.svg through Graphviz
# and runs nothing else; `ringflow bench --mpi-baseline PATH` with shell
# syntax in PATH runs that program, not the shell's reading of it.
#   no_shell.sh RINGFLOW GRAPH.json [MPI_BASELINE]
set -euo pipefail
ringflow="$1"
graph="$2"
baseline="${3:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
dir="d';touch pwned;'"
"$ringflow" lower --devices 3 "$graph" --dot "$dir" > out
[ ! -e pwned ] || { echo "--dot ran a shell command"; exit 1; }
[ -s "$dir/before.dot" ] && [ -s "$dir/after.dot" ]
if command -v dot > /dev/null; then
  for stem in before after; do
    grep -q "<svg" "$dir/$stem.svg" || { echo "no $dir/$stem.svg"; cat out; exit 1; }
    grep -qF "wrote $dir/$stem.svg" out
  done
fi
# A --dot directory that reads as an option of dot's, and a long one.
"$ringflow" lower --devices 3 "$graph" --dot "-Tps" > out
[ -s "-Tps/before.dot" ]
if command -v dot > /dev/null; then grep -q "<svg" ./-Tps/before.svg; fi
long=$(printf 'x%.0s' $(seq 1 200))
mkdir -p "$long/$long/$long/$long/$long"
"$ringflow" lower --devices 3 "$graph" --dot "$long/$long/$long/$long/$long/$long" > out
[ -s "$long/$long/$long/$long/$long/$long/after.dot" ]
# A --dot directory that cannot be made: an error naming it, not a file.
if "$ringflow" lower --devices 3 "$graph" --dot "no/such/parent" > out 2> err; then
  echo "--dot into a missing parent succeeded"; exit 1
fi
grep -qF "cannot create the directory no/such/parent" err || { cat err; exit 1; }
if [ -n "$baseline" ] && command -v mpirun > /dev/null; then
  prog="b;touch pwned;#"
  ln -s "$baseline" "$prog"
  "$ringflow" bench --quick --devices 2 --max 1K --collective all_reduce \
    --no-floor --mpi-baseline "./$prog" > out 2>&1 || { cat out; exit 1; }
  [ ! -e pwned ] || { echo "--mpi-baseline ran a shell command"; exit 1; }
  cat out
  # the command line printed is one a shell runs as the same command
  grep -qF "# OpenMPI, default environment: env -u MALLOC_MMAP_THRESHOLD_ mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader './b;touch pwned;#' --min 1024" out
  if grep -q "OpenMPI baseline: failed" out; then exit 1; fi
fi
echo "no_shell: ok"
