#!/usr/bin/env bash
# One command for a GPU machine: configure and build with CUDA, run every `gpu` test, run the GPU
# benchmarks (Kiln vs PyTorch side by side), and print a short table last.
#
# On the device machine (see README, "Checking on a GPU"): carry the dependency prefix .deps made
# on the development machine (its env.sh, sourced below when present, sets CMAKE_PREFIX_PATH,
# LD_LIBRARY_PATH and KILN_DEVICE_CMAKE_ARGS), then run
#     bash scripts/gpu-check.sh            # everything (may pass the device tool's 10 minutes a call:
#     bash scripts/gpu-check.sh --tests    #   then split it) build + gpu tests only
#     bash scripts/gpu-check.sh --bench    # build (incremental) + benchmarks and AMP curves only
#     ... --prebuilt                       # with either: no configure/build; run build-gpu as unpacked
#                                          #   by scripts/device-prebuilt.sh (built on the dev machine)
# KILN_GPU_TEST_JOBS (default 1) and KILN_GPU_TEST_TIMEOUT (default 300 s) shape the ctest run.
# Logs go to $OUT/gpu-check (the device tool brings $OUT back) or build-gpu/gpu-check.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mode=all prebuilt=0
for a in "$@"; do
  case $a in
    --tests|--bench) mode=$a ;;
    --prebuilt) prebuilt=1 ;;
    *) echo "gpu-check: unknown flag $a (--tests, --bench, --prebuilt)"; exit 2 ;;
  esac
done
[ -f .deps/env.sh ] && source .deps/env.sh
build=${KILN_BUILD_DIR:-$root/build-gpu}
logs=${OUT:-$build}/gpu-check
mkdir -p "$logs"
py=${KILN_PYTHON:-$(command -v python3)}
summary=()
note() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }

nvidia-smi -L 2>/dev/null | tee "$logs/gpu.txt" || echo "nvidia-smi: not found" | tee "$logs/gpu.txt"

start=$(date +%s)
if [ "$prebuilt" = 1 ]; then
  # A build from another machine: find what its executables need among the device's libraries
  # (CUDA's pip wheels, the toolkit), and libgomp in build-gpu/lib if the system has none.
  ldconfig -p | grep -q 'libgomp.so.1 ' || export LD_LIBRARY_PATH="$build/lib:$LD_LIBRARY_PATH"
  roots=$("$py" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
  for lib in $(ldd "$build"/tests/* "$build"/apps/* 2>/dev/null | awk '/not found/{print $1}' | sort -u); do
    hit=$(find $roots /usr/local/cuda*/ -name "$lib" 2>/dev/null | head -1)
    [ -n "$hit" ] && export LD_LIBRARY_PATH="$(dirname "$hit"):$LD_LIBRARY_PATH"
  done
  missing=$(ldd "$build"/tests/* "$build"/apps/* 2>/dev/null | awk '/not found/{print $1}' | sort -u)
  [ -n "$missing" ] && { echo "gpu-check: libraries not found: $missing"; exit 1; }
  ldd "$build/tests/dist_worker" >"$logs/ldd.txt" 2>&1
  # For commands run after this one (a benchmark alone): source build-gpu/env.sh.
  echo "export LD_LIBRARY_PATH='$LD_LIBRARY_PATH'" >"$build/env.sh"
  build_note="prebuilt ($(cat .gpubin/commit 2>/dev/null || echo '?')), libraries resolved"
else
cmake -S . -B "$build" -G Ninja ${KILN_DEVICE_CMAKE_ARGS:--DCMAKE_BUILD_TYPE=Release} -DKILN_CUDA=ON \
  >"$logs/configure.txt" 2>&1 || { tail -30 "$logs/configure.txt"; echo "gpu-check: configure failed"; exit 1; }
if ! cmake --build "$build" -j "$(nproc)" >"$logs/build.txt" 2>&1; then
  grep -E "error|FAILED" "$logs/build.txt" | head -40
  echo "gpu-check: build failed (log: $logs/build.txt)"
  exit 1
fi
build_note="ok in $(( $(date +%s) - start )) s"
fi
note "build" "$build_note"

# Every gpu-labelled test (kernels vs the CPU, NCCL ranks sharing the one GPU).
tests_rc=0
if [ "$mode" != "--bench" ]; then
  ctest --test-dir "$build" -L gpu --output-on-failure -j "${KILN_GPU_TEST_JOBS:-1}" \
    --timeout "${KILN_GPU_TEST_TIMEOUT:-300}" >"$logs/gpu-tests.txt" 2>&1
  tests_rc=$?
  grep -E "tests passed|tests failed" "$logs/gpu-tests.txt" | tail -1
  grep -E "\*\*\*Failed|\*\*\*Exception|Timeout|Not Run" "$logs/gpu-tests.txt" | head -30
  note "gpu tests" "$(grep -E 'tests passed' "$logs/gpu-tests.txt" | tail -1)"
  skipped=$(grep -c "Skipped" "$logs/gpu-tests.txt" || true)
  [ "$skipped" -gt 0 ] && note "gpu tests skipped" "$skipped (no usable GPU seen by the tests?)"
fi

if [ "$mode" != "--tests" ]; then
  # Kernels vs PyTorch.
  "$build/apps/bench_cuda" --python "$py" 2>&1 | tee "$logs/bench_cuda.txt"

  # NCCL allreduce bandwidth, two ranks on the one GPU (each posing as its own host).
  KILN_TEST_ONE_GPU=1 "$build/apps/kiln-run" --nproc-per-node 2 --standalone /bin/sh -c \
    'NCCL_HOSTID=kiln-bench-$RANK NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_MNNVL_ENABLE=0 exec "$0" --backend nccl --max-bytes 268435456 --min-seconds 0.2' \
    "$build/apps/bench_allreduce" 2>&1 | tee "$logs/bench_allreduce.txt"
  note "nccl allreduce 256 MiB (2 ranks, 1 GPU)" "$(grep -E '^ *256 MiB' "$logs/bench_allreduce.txt" | awk '{print $NF " GB/s busbw"}')"

  # Issue #5: fp32 / bf16 / fp16 loss curves and speed-ups of gpt-tiny and gpt2-124m.
  bash scripts/amp-curves.sh "$build" "$build/amp-curves" 2>&1 | tee "$logs/amp_curves.txt"
  note "amp curves (final loss vs fp32)" "$(grep -c FAIL "$logs/amp_curves.txt" || true) failure(s)"

  # Whole-model training steps, Kiln vs PyTorch (eager, torch.compile), on the GPU.
  "$build/apps/bench_gpt" --device cuda --python "$py" 2>&1 | tee "$logs/bench_gpt.txt"
  "$build/apps/bench_gpt" --device cuda --config gpt-1.3b --recompute --python "$py" 2>&1 | tee "$logs/bench_gpt_recompute.txt"
  "$build/apps/bench_gpt" --device cuda --config gpt2-124m --ddp-overhead --no-torch 2>&1 | tee "$logs/bench_gpt_ddp.txt"
  "$build/apps/bench_cifar" --device cuda --python "$py" 2>&1 | tee "$logs/bench_cifar.txt"
  note "bench_gpt (cuda)" "see $logs/bench_gpt*.txt"
  note "bench_cifar (cuda)" "$(grep -E 'x$' "$logs/bench_cifar.txt" | tail -1)"
fi

echo
echo "== gpu-check summary ($(head -1 "$logs/gpu.txt")) =="
for s in "${summary[@]}"; do echo "$s"; done
[ -f "$logs/bench_cuda.txt" ] && grep -E "^case|x$|^PyTorch" "$logs/bench_cuda.txt"
exit $tests_rc
