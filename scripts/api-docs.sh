#!/usr/bin/env bash
# Builds the API reference (Doxygen over the installed headers, docs/Doxyfile) and fails on any
# Doxygen warning. The build must be built: it is installed into a temporary prefix first, so the
# reference covers exactly what an embedder gets. Exit 77 (skipped) when doxygen is not installed.
#   scripts/api-docs.sh [BUILD_DIR (build)] [OUT_DIR (docs/api)]   # then open OUT_DIR/html/index.html
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(realpath -m "${1:-$root/build}")"
out="$(realpath -m "${2:-$root/docs/api}")"

if ! command -v doxygen >/dev/null; then
  echo "api-docs: doxygen is not installed (apt-get install doxygen, or scripts/setup-deps.sh): skipped"
  exit 77
fi
[ -f "$build/CMakeCache.txt" ] || { echo "api-docs: $build is not a configured build directory" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/kiln-api-docs.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; echo "api-docs: cmake --install $build failed (is it built?)" >&2; exit 1; }

rm -rf "$out/html"  # only what Doxygen writes (HTML_OUTPUT = html)
mkdir -p "$out"
status=0
KILN_API_ROOT="$root" KILN_API_INPUT="$work/prefix/include/kiln" KILN_API_STRIP="$work/prefix/include" KILN_API_OUTPUT="$out" \
  doxygen "$root/docs/Doxyfile" >"$work/doxygen.log" 2>"$work/warnings.log" || status=$?
if [ -s "$work/warnings.log" ] || [ "$status" -ne 0 ]; then
  # Paths as an embedder includes them (kiln/core/tensor.h), not the temporary prefix.
  # (Doxygen repeats a warning once per output it writes: each is shown once.)
  sed "s|$work/prefix/include/||g" "$work/warnings.log" | awk '!seen[$0]++' >"$work/unique.log"
  cat "$work/unique.log" >&2
  echo "api-docs: doxygen reported $(grep -c -e "warning:" -e "error:" "$work/unique.log" || true) warning(s) (exit $status)" >&2
  exit 1
fi
echo "api-docs: $out/html/index.html"
