#!/usr/bin/env bash
# Builds the GPU tests and apps HERE (2 cores, no GPU) and packs them for the lent GPU machine, so
# that its few minutes go to running, not compiling (the device tool carries at most 64 MiB).
#
#   here:   bash scripts/device-prebuilt.sh pack     # build-gpu/ (CUDA sm_90, no -march=native,
#                                                    # no oneDNN) -> .gpubin/build-gpu.tar.xz
#   device: carry ".deps" and ".gpubin", then
#           source .deps/env.sh && bash scripts/device-prebuilt.sh unpack &&
#           bash scripts/gpu-check.sh --tests --prebuilt
#
# The build keeps this checkout's absolute paths (CTest files, RPATHs, KILN_SOURCE_DIR); unpack
# makes them resolve on the device by linking that path to the device's checkout. Libraries the
# device lacks are not packed here: gpu-check.sh --prebuilt finds cuDNN/NCCL/cuBLAS in the device's
# pip wheels (.deps/env.sh) and libgomp in build-gpu/lib.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=build-gpu
pack_dir=.gpubin
apps=(kiln-run bench_gpt train_gpt bench_cuda bench_cifar bench_allreduce train_cifar kiln-make-shards
      sample_gpt)

pack() {
  grep -qx "/$pack_dir/" .git/info/exclude 2>/dev/null || echo "/$pack_dir/" >> .git/info/exclude
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_NATIVE=OFF \
    -DKILN_ONEDNN=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  # The gpu-labelled suites are tests/<folder>/test_cuda_*.cpp, each its own executable.
  local suites=()
  for src in tests/*/test_cuda_*.cpp; do
    local folder name
    folder=$(basename "$(dirname "$src")") name=$(basename "$src" .cpp)
    suites+=("${folder}_${name#test_}")
  done
  # ex_cuda (the CUDA example, a gpu test) when the build has the examples, with its working folder.
  local examples=()
  [ -d "$build/tests/examples/cuda" ] && examples=(ex_cuda)
  cmake --build "$build" -j "$(nproc)" --target "${suites[@]}" dist_worker "${apps[@]}" "${examples[@]}"
  mkdir -p "$build/lib" "$pack_dir"
  cp -L "$(gcc -print-file-name=libgomp.so.1)" "$build/lib/"
  local files=()
  mapfile -t files < <(cd "$build" && find . -name CTestTestfile.cmake)
  for s in "${suites[@]}" dist_worker; do files+=("tests/$s"); done
  for a in "${apps[@]}"; do files+=("apps/$a"); done
  files+=(lib)
  [ ${#examples[@]} -gt 0 ] && files+=(examples/ex_cuda tests/examples/cuda)
  # One solid xz stream with a large dictionary: the executables share most of their bytes.
  (cd "$build" && tar cf - "${files[@]}") | xz -T1 -9 --lzma2=dict=256MiB > "$pack_dir/build-gpu.tar.xz"
  echo "$root" > "$pack_dir/root"
  git describe --always --dirty > "$pack_dir/commit"  # -dirty: built with uncommitted changes
  du -sh "$pack_dir" | awk '{print "packed " $2 " (" $1 "); carry \".deps\" and \".gpubin\""}'
}

unpack() {
  [ -f "$pack_dir/build-gpu.tar.xz" ] || { echo "device-prebuilt: no $pack_dir/build-gpu.tar.xz (carry .gpubin)"; exit 1; }
  mkdir -p "$build"
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$pack_dir/build-gpu.tar.xz" "$build"
  local built_at
  built_at=$(cat "$pack_dir/root")
  if [ "$built_at" != "$root" ]; then
    if [ -e "$built_at" ] && [ ! -L "$built_at" ]; then
      echo "device-prebuilt: $built_at exists here and is not a link; cannot map the build's paths"; exit 1
    fi
    mkdir -p "$(dirname "$built_at")" && ln -sfn "$root" "$built_at"
  fi
  echo "unpacked build-gpu (commit $(cat "$pack_dir/commit"), built at $built_at) into $root/$build"
}

case ${1:-} in
  pack) pack ;;
  unpack) unpack ;;
  *) echo "usage: $0 pack|unpack"; exit 2 ;;
esac
