#!/usr/bin/env bash
# The README's "building by hand": install into a temporary prefix, then build
# and run examples/allreduce_grad.c against the installed library through
# pkg-config, as a user's program would.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake -S . -B build-install -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DRF_BUILD_TESTS=OFF -DRF_BUILD_BENCH=OFF >/dev/null
ninja -C build-install >/dev/null
cmake --install build-install >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig"
cc -std=c11 -Wall -Werror examples/allreduce_grad.c -o "$prefix/example" \
  $(pkg-config --cflags --libs ringflow) -Wl,-rpath,"$prefix/lib:$prefix/lib/x86_64-linux-gnu"
"$prefix/example"
echo "install_check: the installed library builds and runs the example"
