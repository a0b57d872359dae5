#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/; clang, ASan + UBSan + coverage, libraries only, in
# build-fuzz/, or in KILN_FUZZ_BUILD_DIR: CI points it at scripts/sanitize.sh asan's tree, which
# already holds them) and runs each for SECONDS (default 60) over its committed seed corpus (README, "Sanitizers and fuzzers").
#   scripts/fuzz.sh [SECONDS] [HARNESS...]     e.g. scripts/fuzz.sh 600 safetensors checkpoint
# New inputs a run finds go to build-fuzz/fuzz/corpus/<name>/ (the committed corpus is only read);
# a crash, sanitizer report, leak, timeout or over-limit allocation stops that harness and leaves
# the input in build-fuzz/fuzz/findings/<name>/: fix the reader, copy the input into
# fuzz/corpus/<name>/ as a regression seed. KILN_FUZZ_PARALLEL=N runs N harnesses at once
# (default 1; CI uses the machine's cores). Exits non-zero if any harness found something.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
shift || true
all=(token_shard safetensors checkpoint cifar10 store_protocol gpt_config tokenizer)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
build=${KILN_FUZZ_BUILD_DIR:-$root/build-fuzz}
cxx=${KILN_FUZZ_CXX:-$(command -v clang++-16 || command -v clang++ || command -v clang++-14 || true)}
[ -n "$cxx" ] || { echo "fuzz.sh: clang++ not found (scripts/setup-deps.sh installs clang)" >&2; exit 1; }
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
start=$(date +%s)
# A tree already configured with KILN_FUZZ=ON (scripts/sanitize.sh asan's, with clang++-16) is
# reused as it is: its harnesses are built, or built here.
if grep -qs '^KILN_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "fuzz.sh: reusing $build (configured with KILN_FUZZ=ON)"
else
  cmake -S "$root" -B "$build" -G Ninja -DKILN_CUDA=OFF -DKILN_NATIVE=ON -DCMAKE_CXX_COMPILER="$cxx" -DKILN_FUZZ=ON \
    -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_APPS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" >/dev/null || exit 1
fi
cmake --build "$build" -j "${KILN_JOBS:-$(nproc)}" --target "${targets[@]}" || exit 1
echo "fuzz.sh: harnesses built in $(( $(date +%s) - start )) s"

sym=$(dirname "$(readlink -f "$cxx")")/llvm-symbolizer  # readable reports (clang-16 has no unversioned one)
[ -x "$sym" ] || sym=$(command -v llvm-symbolizer || command -v llvm-symbolizer-16 || true)
symbolizer=${sym:+:external_symbolizer_path=$sym}
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1$symbolizer"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1$symbolizer"
# Inputs: a few KB (the formats' headers and a few records); CIFAR needs room for 2 records of 3073 B.
max_len() { case $1 in cifar10) echo 8192 ;; checkpoint|safetensors) echo 8192 ;; *) echo 4096 ;; esac; }

# The tokenizer harness encodes with GPT-2's own tables (scripts/get-gpt2-tokenizer.sh, run by
# setup-deps.sh); without them (offline) it is skipped, saying so.
gpt2_dir=${KILN_CACHE:+$KILN_CACHE/gpt2}
gpt2_dir=${gpt2_dir:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/kiln/gpt2}

run_one() {
  local n=$1 out=$build/fuzz
  if [ "$n" = tokenizer ] && [ ! -f "$gpt2_dir/encoder.json" -o ! -f "$gpt2_dir/vocab.bpe" ]; then
    echo "fuzz tokenizer: SKIPPED (no GPT-2 tables in $gpt2_dir; scripts/get-gpt2-tokenizer.sh fetches them)"
    return 0
  fi
  mkdir -p "$out/corpus/$n" "$out/findings/$n" "$out/logs"
  # -malloc_limit_mb: one allocation over 256 MB from an input of at most 8 KB is a finding (a
  # missing cap on an absurd header), as is a leak, a 10-second input or 2 GB of RSS.
  "$build/fuzz/fuzz_$n" -max_total_time="$seconds" -max_len="$(max_len "$n")" -malloc_limit_mb=256 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$out/findings/$n/" \
    "$out/corpus/$n" "$root/fuzz/corpus/$n" >"$out/logs/$n.txt" 2>&1
  local rc=$?
  local stats
  stats=$(grep -E "^#[0-9]+.*(cov|DONE)" "$out/logs/$n.txt" | tail -1)
  local execs
  execs=$(grep -E "stat::number_of_executed_units" "$out/logs/$n.txt" | awk '{print $2}')
  printf 'fuzz %-15s %4s s  rc %-3s execs %-9s %s\n' "$n" "$seconds" "$rc" "${execs:-?}" "$(echo "$stats" | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*')"
  if [ $rc -ne 0 ]; then
    echo "fuzz $n: FINDING (log $out/logs/$n.txt, input in $out/findings/$n/):"
    grep -E "ERROR|kiln fuzz finding|SUMMARY|runtime error" "$out/logs/$n.txt" | head -5
  fi
  return $rc
}

parallel=${KILN_FUZZ_PARALLEL:-1}
failed=0
pids=()
for n in "${names[@]}"; do
  run_one "$n" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$parallel" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
[ $failed -eq 0 ] && echo "fuzz.sh: ${#names[@]} harnesses, $seconds s each, no findings" || echo "fuzz.sh: FINDINGS (see above)"
exit $failed
