#!/usr/bin/env bash
# What CI runs (.ci/run): scripts/test.sh (dependencies, the build, every test), then the
# ASan+UBSan suite (scripts/sanitize.sh asan) and every fuzz harness for KILN_CI_FUZZ_SECONDS
# (default 60) each, both cores busy. KILN_CI_TSAN=1 adds the TSan suite (off by default: it does
# not fit the 35-minute budget of a cold run on the 2-core machine; README, "Sanitizers and fuzzers").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
start=$(date +%s)
stage() { echo "ci.sh: $1 done at $(( $(date +%s) - start )) s"; }
bash "$root/scripts/test.sh"
stage "test.sh"
bash "$root/scripts/sanitize.sh" asan
stage "ASan+UBSan suite"
# sanitize.sh asan built the harnesses too when clang++-16 is installed (setup-deps.sh installs it).
grep -qs '^KILN_FUZZ:BOOL=ON' "$root/build-asan/CMakeCache.txt" && export KILN_FUZZ_BUILD_DIR=${KILN_FUZZ_BUILD_DIR:-$root/build-asan}
KILN_FUZZ_PARALLEL=${KILN_FUZZ_PARALLEL:-$(nproc)} bash "$root/scripts/fuzz.sh" "${KILN_CI_FUZZ_SECONDS:-60}"
stage "fuzzers"
if [ "${KILN_CI_TSAN:-0}" = 1 ]; then
  bash "$root/scripts/sanitize.sh" tsan
  stage "TSan suite"
fi
echo "ci.sh: done in $(( $(date +%s) - start )) s"
