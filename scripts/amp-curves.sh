#!/usr/bin/env bash
# Issue #5's GPU check: gpt-tiny and gpt2-124m trained on the GPU under fp32, bf16 autocast and
# fp16 autocast + loss scaling, from the same init and data; prints each run's first and final
# loss (mean of the last 10 logged steps), its distance from the fp32 run and its tokens/s
# relative to fp32. Fails if a low-precision curve ends more than TOL (default 0.05 nats) from fp32.
# Usage: scripts/amp-curves.sh BUILD_DIR [WORK_DIR]     (run by scripts/gpu-check.sh)
set -euo pipefail
build=$1 work=${2:-$1/amp-curves}
tol=${KILN_AMP_TOL:-0.05}
device=${KILN_AMP_DEVICE:-cuda}     # cpu: a quick check of this script (use KILN_AMP_STEPS=30)
steps=${KILN_AMP_STEPS:-}           # overrides both models' step counts
models=${KILN_AMP_MODELS:-tiny 124m}
rm -rf "$work" && mkdir -p "$work"
"$build/apps/kiln-make-shards" --synthetic --tokens 4000000 --lags 2,3 --noise 0.5 --out "$work/data" >/dev/null
run() {  # name model steps batch seq dtype
  "$build/apps/train_gpt" --model "$2" --train "$work/data/train_*.bin" --device "$device" --dtype "$6" \
    --steps "${steps:-$3}" --warmup-steps 10 --batch-size "$4" --seq-len "$5" --lr 1e-3 --log-every 1 --seed 7 \
    --metrics "$work/$1_$6.jsonl" >"$work/$1_$6.txt" 2>&1 || { tail -5 "$work/$1_$6.txt"; return 1; }
}
for dt in fp32 bf16 fp16; do
  for m in $models; do
    case $m in
      tiny) run tiny gpt-tiny 400 16 128 "$dt" ;;
      124m) run 124m gpt2-124m 150 8 512 "$dt" ;;
      *) echo "amp-curves: unknown model $m (tiny, 124m)"; exit 2 ;;
    esac
  done
done
python3 - "$work" "$tol" $models <<'PY'
import json, sys
work, tol, models = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
def stats(path):
    rows = [o for o in map(json.loads, open(path)) if o.get("type") == "train"]
    losses = [o["loss"] for o in rows]
    speed = [o["tokens_per_s"] for o in rows[len(rows) // 2:]]  # after warm-up
    return losses[0], sum(losses[-10:]) / 10, sum(speed) / len(speed)
bad = 0
print("%-6s %-5s %10s %10s %10s %12s %8s" % ("model", "dtype", "first", "final", "vs fp32", "tokens/s", "speed-up"))
for model in models:
    f0, l0, s0 = stats("%s/%s_fp32.jsonl" % (work, model))
    for dt in ("fp32", "bf16", "fp16"):
        f, l, s = stats("%s/%s_%s.jsonl" % (work, model, dt))
        print("%-6s %-5s %10.4f %10.4f %+10.4f %12.0f %7.2fx" % (model, dt, f, l, l - l0, s, s / s0))
        if abs(l - l0) > tol:
            bad += 1
            print("  FAIL: %s %s ends %.4f from fp32 (tolerance %.3f)" % (model, dt, l - l0, tol))
sys.exit(1 if bad else 0)
PY
