#!/bin/sh
# The benchmarks' papercuts (issue #41), end to end on the real executables:
#  - a build folder moved elsewhere still finds each Python side beside its executable (and the
#    modules those import: bench_util.py, torch_gpt.py, torch_cifar_cnn.py), before the source
#    tree's copy; --torch-script overrides it, and a missing one is a clear error;
#  - --dtype takes both spellings (f32/fp32) and a bad one lists the choices.
# Usage: bench_apps.sh BUILD_APPS_DIR. The real PyTorch sides run only with /usr/bin/python3 and torch.
BIN="$1"
. "$(dirname "$0")/../test_util.sh"
moved="$T/moved"
mkdir -p "$moved"
for f in bench_ops bench_gpt bench_cifar bench_ops.py bench_gpt.py bench_cifar.py bench_util.py torch_gpt.py \
         torch_cifar_cnn.py train_gpt train_cifar; do
  cp "$BIN/$f" "$moved/" || fail "the build has no $BIN/$f"
done

# A fake python that records the script it was given and answers with an empty result.
cat > "$T/python" <<SH
#!/bin/sh
echo "\$1" >> "$T/scripts"
echo '{"torch": "fake", "blas": "-"}'
SH
chmod +x "$T/python"
"$moved/bench_ops" --gemm 32 --elements 4096 --rounds 1 --threads 1 --python "$T/python" > "$T/out" 2>&1 ||
  fail "bench_ops with the fake python: $(cat "$T/out")"
[ "$(cat "$T/scripts")" = "$moved/bench_ops.py" ] || fail "bench_ops ran '$(cat "$T/scripts")', not $moved/bench_ops.py"
rm -f "$T/scripts"
"$moved/bench_ops" --gemm 32 --elements 4096 --rounds 1 --threads 1 --python "$T/python" --torch-script "$T/python" \
  > "$T/out" 2>&1 || fail "bench_ops --torch-script: $(cat "$T/out")"
[ "$(cat "$T/scripts")" = "$T/python" ] || fail "--torch-script did not override: ran '$(cat "$T/scripts")'"
"$moved/bench_ops" --gemm 32 --gemm-dtype bf16 --elements 4096 --rounds 1 --threads 1 --no-torch > "$T/out" 2>&1 ||
  fail "bench_ops --gemm-dtype bf16: $(cat "$T/out")"
grep -q "bf16 GEMMs" "$T/out" && grep -q "^gemm_32 " "$T/out" || fail "bench_ops --gemm-dtype bf16 did not say so: $(cat "$T/out")"
"$moved/bench_ops" --gemm-dtype f64 > "$T/out" 2>&1 && fail "bench_ops --gemm-dtype f64 exited 0"
"$moved/bench_cifar" --torch-script "$T/missing.py" > "$T/out" 2> "$T/err" && fail "a missing --torch-script exited 0"
grep -q "$T/missing.py" "$T/err" || fail "the error does not name the missing script: $(cat "$T/err")"

# --dtype: both spellings, Kiln's name passed on; a bad one lists the choices.
for d in f32 fp32; do
  "$moved/bench_gpt" --no-torch --config gpt-tiny -B 1 -T 8 --warmup 0 --steps 1 --rounds 1 --threads 1 --dtype "$d" \
    > "$T/out" 2>&1 || fail "bench_gpt --dtype $d: $(cat "$T/out")"
  grep -q "cpu f32 training step" "$T/out" || fail "bench_gpt --dtype $d did not run f32: $(cat "$T/out")"
done
"$moved/train_gpt" --dtype fp64 > "$T/out" 2> "$T/err" && fail "train_gpt --dtype fp64 exited 0"
grep -q "f32 (fp32), bf16, f16 (fp16)" "$T/err" || fail "train_gpt --dtype fp64 does not list the choices: $(cat "$T/err")"
"$moved/train_cifar" --dtype fp16 > "$T/out" 2> "$T/err" && fail "train_cifar --dtype fp16 exited 0"
grep -q "f32 (fp32), bf16" "$T/err" || fail "train_cifar --dtype fp16 does not list the choices: $(cat "$T/err")"

# The real PyTorch sides from the moved folder (their imports resolve there: no tests/parity beside it).
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  "$moved/bench_cifar" --models tiny --tiny-batch 8 --rounds 1 --min-iters 1 --threads 1 --dtype fp32 > "$T/out" 2>&1 ||
    fail "moved bench_cifar: $(cat "$T/out")"
  grep -q "^tiny .*x$" "$T/out" || fail "moved bench_cifar printed no ratio: $(cat "$T/out")"
  "$moved/bench_gpt" --config gpt-tiny -B 1 -T 16 --warmup 0 --steps 1 --rounds 1 --threads 1 > "$T/out" 2>&1 ||
    fail "moved bench_gpt: $(cat "$T/out")"
  grep -q "torch eager" "$T/out" && ! grep -q "failed" "$T/out" || fail "moved bench_gpt's PyTorch side: $(cat "$T/out")"
  grep -q "OpenBLAS core" "$T/out" || echo "note: PyTorch's BLAS is not OpenBLAS here"
else
  echo "no torch for /usr/bin/python3: the real PyTorch sides were not run"
fi
checks_done bench_apps
