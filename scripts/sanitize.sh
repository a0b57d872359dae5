#!/usr/bin/env bash
# Builds the CPU tests with a sanitizer and runs them (README, "Sanitizers and fuzzers").
#   scripts/sanitize.sh asan  [ctest args]   ASan + UBSan, build-asan/; every cpu test but the
#                                            install test and seven long training runs (below)
#   scripts/sanitize.sh ubsan [ctest args]   UBSan alone (no ASan slow-down), build-ubsan/
#   scripts/sanitize.sh tsan  [ctest args]   TSan, build-tsan/; the threaded tests: labels dist and
#                                            data, the autograd thread tests and the apps' DDP runs
# Extra arguments go to ctest (e.g. -R store). KILN_SANITIZE_BUILD_DIR overrides the build folder,
# KILN_JOBS the parallelism, KILN_SANITIZE_CXX the compiler. asan builds with clang++-16 where it is
# installed (scripts/setup-deps.sh installs it) and then also builds the libFuzzer harnesses in the
# same tree (KILN_FUZZ=ON: the libraries carry libFuzzer's coverage, the suites and apps do not),
# so scripts/fuzz.sh needs no build of its own (KILN_FUZZ_BUILD_DIR=build-asan; CI does this);
# KILN_SANITIZE_FUZZ=0 leaves them out. Without clang++-16, and for ubsan and tsan, the compiler is
# the system g++ (12): Debian's default clang 14 refuses lambdas that capture structured bindings,
# which the tests use. Suppressions, one explained entry each: scripts/sanitizers/*.supp.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-}
shift || true
case $mode in
  # Without KILN_SANITIZE_ALL=1, ASan skips seven long training runs that compare final losses or
  # accuracies (apps_gpt_converge 200 s, apps_train_cifar_accuracy 100 s, apps_train_cifar_ddp 150 s,
  # apps_train_cifar_syncbn 95 s, apps_train_cifar_preempt 93 s, apps_train_cifar_sharding 87 s,
  # apps_gpt_powersgd 60 s under ASan on the 2-core machine): the code they run is what
  # apps_gpt_resume/_ddp/_fp16/_preempt, apps_train_cifar_slurm/_resume and the
  # parallel_sync_batch_norm/_fsdp/_zero/_powersgd unit tests run under ASan in seconds.
  asan)  sanitize=address,undefined; select=(-L cpu -LE install)
         [ "${KILN_SANITIZE_ALL:-0}" = 1 ] || select+=(-E '^(apps_gpt_converge|apps_train_cifar_accuracy|apps_train_cifar_ddp|apps_train_cifar_syncbn|apps_train_cifar_preempt|apps_train_cifar_sharding|apps_gpt_powersgd)$') ;;
  ubsan) sanitize=undefined; select=(-L cpu -LE install) ;;
  # TSan: what runs threads of its own (store server, Gloo, reducer, loader workers, launcher).
  # train_cifar's 2-rank DDP run via SLURM's variables, not the 2-rank accuracy run (past its 300 s
  # timeout under TSan, with the CNN's kernels on one thread).
  tsan)  sanitize=thread; select=(-L cpu -LE install -R '^(parallel_|data_|autograd_meta_threads|kiln_run|apps_gpt_ddp|apps_train_cifar_slurm)') ;;
  *) echo "usage: $0 {asan|ubsan|tsan} [ctest args...]" >&2; exit 2 ;;
esac
build=${KILN_SANITIZE_BUILD_DIR:-$root/build-$mode}
jobs=${KILN_JOBS:-$(nproc)}
default_cxx=$(command -v g++ || command -v c++)
[ "$mode" = asan ] && command -v clang++-16 >/dev/null && default_cxx=$(command -v clang++-16)
cxx=${KILN_SANITIZE_CXX:-$default_cxx}
fuzz=OFF
[ "$mode" = asan ] && [ "${KILN_SANITIZE_FUZZ:-1}" = 1 ] && "$cxx" --version 2>/dev/null | grep -q clang && fuzz=ON
supp=$root/scripts/sanitizers

start=$(date +%s)
# -O1 with line tables: the optimisation level the sanitizers are designed for, readable reports.
# No benchmarks: no test runs them.
cmake -S "$root" -B "$build" -G Ninja -DKILN_CUDA=OFF -DKILN_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_COMPILER="$cxx" -DKILN_SANITIZE=$sanitize -DKILN_FUZZ=$fuzz \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
cmake --build "$build" -j "$jobs"
built=$(date +%s)

# The reports and the suppressions (matched against function names) need a symbolizer: the one of
# the compiler's LLVM (clang-16 comes with llvm-symbolizer-16 but not with the unversioned one).
sym=$(dirname "$(readlink -f "$cxx")")/llvm-symbolizer
[ -x "$sym" ] || sym=$(command -v llvm-symbolizer || command -v llvm-symbolizer-16 || true)
symbolizer=${sym:+:external_symbolizer_path=$sym}
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1$symbolizer"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0$symbolizer"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp$symbolizer"
export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1:history_size=4"
# Note [TSan and OpenMP]: Debian's libomp is not built with TSan's annotations, so TSan cannot see
# its barriers and reports every parallel_for as a race. The threads TSan is here for (store server,
# Gloo, reducer, loader workers) are std::threads; the OpenMP kernels run on one thread under TSan.
[ "$mode" = tsan ] && export OMP_NUM_THREADS=1
rc=0
ctest --test-dir "$build" --output-on-failure -j "$jobs" "${select[@]}" "$@" || rc=$?
echo "sanitize.sh $mode: build $(( built - start )) s, tests $(( $(date +%s) - built )) s, exit $rc"
exit $rc
