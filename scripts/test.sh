#!/usr/bin/env bash
# Builds ringflow and runs its test suite: the README's test command.
#   scripts/test.sh                        normal build (build/)
#   scripts/test.sh --sanitize address,undefined   ASan+UBSan build (build-asan/)
#   scripts/test.sh --sanitize thread      TSan build of the runtime tests (build-tsan/)
#   scripts/test.sh --without-cuda         as if no CUDA toolkit were installed (build-nocuda/;
#                                          with --sanitize: build-asan-nocuda/, build-tsan-nocuda/)
#   scripts/test.sh --build-only ...       build, run nothing
#   scripts/test.sh --no-python ...        skip the Python package and its tests
# Extra arguments after -- go to ctest (e.g. -- -R session).
# Then the Python package is built and installed (scripts/python_env.sh) and
# its tests (tests/python) run with pytest: into .venv on the normal build,
# into .venv-asan built with the sanitizers under --sanitize address,undefined
# (not under TSan).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
san=""
dir=build
cuda=ON
build_only=0
python=1
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize)
      san="$2"; shift 2 ;;
    --without-cuda) cuda=OFF; shift ;;
    --build-only) build_only=1; shift ;;
    --no-python) python=0; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
case "$san" in
  "") dir=build ;;
  thread) dir=build-tsan ;;
  *) dir=build-asan ;;
esac
if [ "$cuda" = OFF ]; then
  [ -z "$san" ] && dir=build-nocuda || dir=$dir-nocuda
fi
jobs=$(nproc)
cmake -S . -B "$dir" -G Ninja -DRF_SANITIZE="$san" -DRF_WITH_CUDA="$cuda" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$dir" -j "$jobs"
[ "$build_only" = 1 ] && exit 0
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
args=()
if [ "$san" = "thread" ]; then
  # ThreadSanitizer covers the concurrent parts: runtime, collectives, comm.
  args=(-L concurrency)
fi
ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${args[@]}" "$@"
[ "$python" = 1 ] || exit 0
[ "$san" = thread ] && exit 0
# The Python package and its tests: in .venv on the normal build; under
# ASan+UBSan in .venv-asan, a package built with the sanitizers and run with
# libasan preloaded (the interpreter is not instrumented; its own
# allocations live until exit, so leak checks stay off there).
pyrun=()
if [ -z "$san" ]; then
  venv=.venv
  bash scripts/python_env.sh -C cmake.define.RF_WITH_CUDA="$cuda"
else
  venv=.venv-asan
  VENV=$venv bash scripts/python_env.sh -C cmake.define.RF_WITH_CUDA="$cuda" \
    -C cmake.define.RF_SANITIZE="$san" -C build-dir="build-py-${dir#build-}"
  pyrun=(env LD_PRELOAD="$(cc -print-file-name=libasan.so)"
         ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:protect_shadow_gap=0)
fi
rc=0
RF_RINGFLOW_BIN="$PWD/$dir/tools/ringflow" \
  "${pyrun[@]}" "$venv/bin/python" -m pytest tests/python -q -rs || rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
