#!/usr/bin/env bash
# Formatting (the committed .clang-format) and static analysis (cppcheck), both
# with zero findings; ruff (pyproject.toml's rules) on the Python code.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
files=$(git ls-files '*.c' '*.h')
clang-format --dry-run --Werror $files
cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,performance,portability \
  --inline-suppr --suppress=missingIncludeSystem -D__GNUC__ -Iinclude -Isrc \
  --include=/usr/include/uthash.h \
  -i build -i build-asan -i build-tsan -i build-asan-nocuda -i build-tsan-nocuda src include tools 2>&1
# No shell: the library runs no program, and the command runs others only
# through tools/subprocess.c (posix_spawnp with an argument vector).
if grep -nE '\b(system|popen|exec[lv]p?e?|posix_spawnp?)[[:space:]]*\(' \
     $(git ls-files 'src/*' 'tools/*' | grep -E '\.(c|h|cc|cu)$' |
       grep -v '^tools/subprocess\.c$'); then
  echo "lint: run programs only through tools/subprocess.c (no shell)"; exit 1
fi
# The Python package and its tests: PEP 8 and pyflakes (ruff, in .venv).
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check "ruff>=0.4"
.venv/bin/ruff check python tests/python examples/python \
  bench/python_run_overhead.py bench/gpu_train_vs_pytorch.py bench/ncu_step_table.py \
  bench/bucket_vs_ddp.py bench/bucket_trace_overlap.py bench/bucket_trace_ops.py \
  bench/mpi_scaling_model.py
echo "lint: clang-format, cppcheck, no shell and ruff clean"
