#!/usr/bin/env bash
# The README's "Installing and linking": installs a build into a temporary
# prefix that is not the one it was configured with, moves the installed tree
# elsewhere (the package must be relocatable), then builds and runs
# examples/allreduce_grad.c against it as a user would:
#   1. pkg-config --cflags --libs ringflow          (the shared library)
#   2. pkg-config --static --libs ringflow          (libringflow.a)
#   3. find_package(ringflow COMPONENTS static)     (tests/install: both)
#   scripts/install_check.sh [build-dir]
# The build directory defaults to build/, the one scripts/test.sh builds
# (CI runs that first, so nothing is compiled again); it is configured and
# built here if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${1:-build}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
ninja -C "$build" >/dev/null
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
configured=$(cache CMAKE_INSTALL_PREFIX)
libdir=$(cache CMAKE_INSTALL_LIBDIR)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/installed" >/dev/null
mv "$work/installed" "$work/moved"
prefix=$work/moved
if [ "$(realpath "$prefix")" = "$(realpath -m "$configured")" ]; then
  echo "install_check: $prefix is the configured prefix" >&2
  exit 1
fi
# Runs a program built here; a static one must not need libringflow.so.
run() {
  if [[ $1 == *static* ]] && grep -q 'libringflow\.so' <<< "$(readelf -d "$work/$1")"; then
    echo "install_check: $1 needs libringflow.so" >&2
    exit 1
  fi
  echo "install_check: $1: $("$work/$1")"
}

# 1. pkg-config, shared library.
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
if [ "$(realpath "$(pkg-config --variable=prefix ringflow)")" != "$(realpath "$prefix")" ]; then
  echo "install_check: ringflow.pc's prefix is $(pkg-config --variable=prefix ringflow)" >&2
  exit 1
fi
cc -std=c11 -Wall -Werror examples/allreduce_grad.c -o "$work/pc_shared" \
  $(pkg-config --cflags --libs ringflow) -Wl,-rpath,"$prefix/$libdir"
run pc_shared

# 2. pkg-config --static: the archive in place of -lringflow (the linker
# would take the .so next to it), and what it needs from Libs.private and
# Requires.private.
cc -std=c11 -Wall -Werror examples/allreduce_grad.c -o "$work/pc_static" \
  $(pkg-config --cflags ringflow) \
  $(pkg-config --static --libs ringflow | sed 's/-lringflow\b/-l:libringflow.a/')
run pc_static

# 3. find_package: ringflow::ringflow and ringflow::ringflow_static.
cmake -S tests/install -B "$work/user" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
ninja -C "$work/user" >/dev/null
for t in allreduce_grad_shared allreduce_grad_static; do
  cp "$work/user/$t" "$work/$t"
  run "$t"
done
echo "install_check: the installed package builds and runs the example through pkg-config (shared, static) and find_package (shared, static)"
