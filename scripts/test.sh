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
# (not under TSan). The package is built in the tree just built (its library
# objects are reused: only the extension modules compile), not in build-py/.
# Compiles through ccache when it is installed.
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
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja -DRF_SANITIZE="$san" -DRF_WITH_CUDA="$cuda" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRF_BUILD_PYTHON=OFF "${launcher[@]}" >/dev/null
targets=()
if [ "$san" = thread ] && [ "$build_only" = 0 ]; then
  # Only what the tests run under TSan (below) run: their programs.
  mapfile -t targets < <(ctest --test-dir "$dir" -N -L concurrency --show-only=json-v1 |
    python3 scripts/ctest_programs.py "$dir")
fi
ninja -C "$dir" -j "$jobs" "${targets[@]}"
[ "$build_only" = 1 ] && exit 0
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
args=()
if [ "$san" = "thread" ]; then
  # ThreadSanitizer covers the concurrent parts: runtime, collectives, comm.
  args=(-L concurrency)
fi
# At most $jobs tests that compute run at once (RESOURCE_GROUPS cpus in
# tests/CMakeLists.txt); those that mostly wait out collective timeouts take
# no cpus slot and run beside them (5, label waits: all at once).
printf '{"version":{"major":1,"minor":0},"local":[{"cpus":[{"id":"0","slots":%d}]}]}\n' \
  "$jobs" > "$dir/ctest_resources.json"
ctest --test-dir "$dir" --output-on-failure -j "$((jobs + 5))" \
  --resource-spec-file "$PWD/$dir/ctest_resources.json" "${args[@]}" "$@"
[ "$python" = 1 ] || exit 0
[ "$san" = thread ] && exit 0
# The Python package and its tests: in .venv on the normal build; under
# ASan+UBSan in .venv-asan, a package built with the sanitizers and run with
# libasan preloaded (the interpreter is not instrumented; its own
# allocations live until exit, so leak checks stay off there).
# The package's build is pointed at $dir with $dir's own settings, so pip
# (scikit-build-core) finds it up to date but for the modules; pip's
# defaults (pyproject.toml: Release, no tests/tools, -Werror off) differ
# only in -g and in what else is built. Afterwards $dir is set back.
venv=.venv
pyrun=()
if [ -n "$san" ]; then
  venv=.venv-asan
  pyrun=(env LD_PRELOAD="$(cc -print-file-name=libasan.so)"
         ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:protect_shadow_gap=0)
fi
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$dir/CMakeCache.txt")
VENV=$venv bash scripts/python_env.sh -C build-dir="$dir" \
  -C cmake.build-type=RelWithDebInfo -C cmake.define.RF_WITH_CUDA="$cuda" \
  -C cmake.define.RF_SANITIZE="$san" -C cmake.define.RF_WERROR=ON \
  -C cmake.define.RF_BUILD_TESTS=ON -C cmake.define.RF_BUILD_BENCH=ON \
  -C cmake.define.RF_BUILD_TOOLS=ON -C cmake.define.RF_BUILD_EXAMPLES=ON
cmake -S . -B "$dir" -DRF_BUILD_PYTHON=OFF -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
rc=0
RF_RINGFLOW_BIN="$PWD/$dir/tools/ringflow" \
  "${pyrun[@]}" "$venv/bin/python" -m pytest tests/python -q -rs || rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
