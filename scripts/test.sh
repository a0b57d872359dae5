#!/usr/bin/env bash
# One command from a fresh Debian bookworm machine to a tested build: install dependencies,
# configure, build, run every test. Exits non-zero on any failure. GPU tests report "skipped"
# on machines without a usable GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
start=$(date +%s)
"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh" "$@"
build=${KILN_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j "${KILN_JOBS:-$(nproc)}"
echo "scripts/test.sh: done in $(( $(date +%s) - start )) s"
