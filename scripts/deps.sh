#!/usr/bin/env bash
# Installs the Debian packages ringflow builds, tests and trains with, when any
# is missing (the Python packages go into a virtual environment:
# scripts/python_env.sh). Needs root (or sudo) the first time; a no-op afterwards.
# The GPU build's dependencies are not Debian packages: the CUDA toolkit
# (nvcc, cuBLAS), optionally NCCL, and optionally cuDNN 9 for convolutions
# (in the toolkit's folders, or `pip install nvidia-cudnn-cu13` and
# -DCUDNN_ROOT=<site-packages>/nvidia/cudnn; README.md's GPU section).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libcmocka-dev libopenblas-dev
      libjansson-dev uthash-dev zlib1g-dev dataset-fashion-mnist
      libopenmpi-dev openmpi-bin libgloo-dev graphviz clang-format cppcheck
      python3-dev python3-venv libdnnl-dev
      clang libclang-rt-dev) # the fuzz build (libFuzzer, sanitizers): docs/FUZZING.md
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "ringflow: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
