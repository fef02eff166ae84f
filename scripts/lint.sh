#!/usr/bin/env bash
# Formatting (the committed .clang-format) and static analysis (cppcheck), both
# with zero findings.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
files=$(git ls-files '*.c' '*.h')
clang-format --dry-run --Werror $files
cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,performance,portability \
  --inline-suppr --suppress=missingIncludeSystem -D__GNUC__ -Iinclude -Isrc \
  --include=/usr/include/uthash.h \
  -i build -i build-asan -i build-tsan src include tools 2>&1
echo "lint: clang-format and cppcheck clean"
