#!/usr/bin/env bash
# The README's first command: install dependencies, build, write synthetic token shards with a
# known entropy floor, train gpt-tiny on the CPU for about two minutes (the loss printed next to
# the floor), then sample from the trained checkpoint. Outputs go to $KILN_DEMO_DIR (default demo/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
out=${KILN_DEMO_DIR:-$root/demo}

"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh" "$@"
apps=$build/apps
rm -rf "$out" && mkdir -p "$out"

# 2M tokens; each copies the token 2 or 3 places back (chosen by the previous token) or, with
# probability 0.5, is uniform: the best possible loss is the floor kiln-make-shards prints.
"$apps/kiln-make-shards" --synthetic --tokens 2000000 --lags 2,3 --noise 0.5 --out "$out/data"

# gpt-tiny narrowed to 1 layer of 64 dims: the largest shape that gets close to the floor in about
# two minutes on 2 CPU cores (the 4-layer, 128-dim preset needs far more steps to find the copy rule).
"$apps/train_gpt" --model gpt-tiny --n-layer 1 --n-embd 64 --train "$out/data/train_*.bin" \
  --val "$out/data/val_*.bin" --batch-size 8 --seq-len 128 --steps 3000 --warmup-steps 10 --lr 1e-2 \
  --min-lr 1e-3 --log-every 200 --eval-every 1000 --eval-tokens 32768 --checkpoint-dir "$out/ckpt" \
  --metrics "$out/metrics.jsonl" --loss-svg "$out/loss.svg"

echo "--- sample_gpt (the copy structure shows as repeats 2-3 characters apart):"
"$apps/sample_gpt" --checkpoint "$(ls -v "$out"/ckpt/step_*.safetensors | tail -n 1)" --tokens 120 \
  --prompt "Kiln" --top-k 40
echo "demo: metrics in $out/metrics.jsonl, loss curve in $out/loss.svg"
