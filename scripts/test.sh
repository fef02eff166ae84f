#!/usr/bin/env bash
# Builds ringflow and runs its test suite: the README's test command.
#   scripts/test.sh                        normal build (build/)
#   scripts/test.sh --sanitize address,undefined   ASan+UBSan build (build-asan/)
#   scripts/test.sh --sanitize thread      TSan build of the runtime tests (build-tsan/)
# Extra arguments after -- go to ctest (e.g. -- -R session).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
san=""
dir=build
if [ "${1:-}" = "--sanitize" ]; then
  san="$2"; shift 2
  case "$san" in
    thread) dir=build-tsan ;;
    *) dir=build-asan ;;
  esac
fi
[ "${1:-}" = "--" ] && shift
jobs=$(nproc)
cmake -S . -B "$dir" -G Ninja -DRF_SANITIZE="$san" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$dir" -j "$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
args=()
if [ "$san" = "thread" ]; then
  # ThreadSanitizer covers the concurrent parts: runtime, collectives, comm.
  args=(-L concurrency)
fi
ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${args[@]}" "$@"
