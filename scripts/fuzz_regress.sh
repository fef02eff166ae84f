#!/usr/bin/env bash
# The fuzz regression check of CI (docs/FUZZING.md): builds the libFuzzer
# harnesses with clang (RF_FUZZ: the library under ASan and UBSan, nothing
# else), then runs every fuzz/fuzz_*.c harness for SECONDS (default 60) on
# its corpus (fuzz/corpus/<name>, and fuzz/<name>.dict when there is one),
# two at a time. Fails on any crash, leak, UB report or timeout; the input
# that caused it is kept under BUILD/artifacts.
#   scripts/fuzz_regress.sh [SECONDS] [BUILD]    (default 60, build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
build="${2:-build-fuzz}"
bash scripts/deps.sh
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DRF_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRF_WITH_MPI=OFF -DRF_BUILD_TESTS=OFF \
  -DRF_BUILD_BENCH=OFF -DRF_BUILD_TOOLS=OFF -DRF_BUILD_EXAMPLES=OFF \
  "${launcher[@]}" > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
names=()
for src in fuzz/fuzz_*.c; do names+=("$(basename "$src" .c)"); done
ninja -C "$build" "${names[@]}"
mkdir -p "$build/artifacts"
# One harness: new inputs go to a scratch directory (libFuzzer writes into
# the FIRST corpus directory), never the checked-in seeds.
run_one() {
  local name="$1" corpus="${1#fuzz_}" scratch dict=()
  scratch=$(mktemp -d)
  [ -f "fuzz/$corpus.dict" ] && dict=(-dict="fuzz/$corpus.dict")
  if "$build/fuzz/$name" -max_total_time="$secs" -max_len=16384 -timeout=30 \
       -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$name-" \
       -print_final_stats=1 "${dict[@]}" "$scratch" "fuzz/corpus/$corpus" \
       > "$build/$name.log" 2>&1; then
    echo "fuzz_regress: $name: ok ($(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$build/$name.log" | grep -o '[0-9]*$') inputs in ${secs} s)"
    rm -rf "$scratch"
  else
    tail -n 60 "$build/$name.log"
    echo "fuzz_regress: $name FAILED; input kept in $build/artifacts/"
    rm -rf "$scratch"
    return 1
  fi
}
# Two lanes (CI has 2 cores): harnesses 0, 2, ... and 1, 3, ...
lane() {
  local rc=0 i
  for ((i = $1; i < ${#names[@]}; i += 2)); do run_one "${names[$i]}" || rc=1; done
  return $rc
}
lane 0 & a=$!
lane 1 & b=$!
failed=0
wait "$a" || failed=1
wait "$b" || failed=1
[ "$failed" -eq 0 ] || { echo "fuzz_regress: a harness failed"; exit 1; }
echo "fuzz_regress: ${#names[@]} harnesses, ${secs} s each, no crash"
