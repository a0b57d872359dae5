#!/usr/bin/env bash
# Configures and builds Kiln into build/ (Release, Ninja, ccache). Extra arguments go to CMake,
# e.g. scripts/build.sh -DKILN_CUDA=OFF
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
# Configure quietly but for Kiln's own summary (CUDA, oneDNN, native), so a CI log says what it built.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" | { grep -E '^-- (Kiln|oneDNN)' || true; }
cmake --build "$build" -j "${KILN_JOBS:-$(nproc)}"
