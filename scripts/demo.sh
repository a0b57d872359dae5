#!/usr/bin/env bash
# The README's first command: install dependencies, build, fetch GPT-2's tokenizer and the Brown
# corpus (500 documents of 1961 American English), tokenize it with Kiln's GPT-2 BPE into llm.c
# shards, train a small GPT on the CPU for about two minutes, print its val loss next to the val
# text's unigram entropy (the best loss without context), and sample English from the checkpoint.
# Outputs go to $KILN_DEMO_DIR (default demo/). The synthetic corpus with a known floor is
# tests/apps/gpt_converge.sh (kiln-make-shards --synthetic).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
out=${KILN_DEMO_DIR:-$root/demo}

"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh" "$@"
apps=$build/apps
"$root/scripts/get-gpt2-tokenizer.sh"
corpus=$("$root/scripts/get-brown-corpus.sh")
rm -rf "$out" && mkdir -p "$out"

# ~1.4M GPT-2 tokens; each document opens with <|endoftext|>; the last 10% (a seeded random 10% of
# the documents, see scripts/brown_to_text.py) is val.
"$apps/kiln-make-shards" --tokenizer gpt2 --dir "$corpus" --out "$out/data"

# GPT-2's vocabulary (50257) on a narrow 2-layer model: on 2 CPU cores the 50304-wide output layer
# costs most of each step (~4,100 tokens/s on a 2-core AMD EPYC Zen 4, AVX-512 or AVX2 kernels), so
# the model stays small and sees ~610k tokens (half an epoch) in about two and a half minutes.
"$apps/train_gpt" --model gpt2-124m --n-layer 2 --n-head 4 --n-embd 64 --train "$out/data/train_*.bin" \
  --val "$out/data/val_*.bin" --batch-size 8 --seq-len 128 --steps 600 --warmup-steps 20 --lr 1e-2 \
  --min-lr 1e-3 --log-every 50 --eval-every 100 --eval-tokens 32768 --checkpoint-dir "$out/ckpt" \
  --metrics "$out/metrics.jsonl" --loss-svg "$out/loss.svg"

python3 - "$out/metrics.jsonl" "$out/data/unigram_entropy.txt" <<'PY'
import json, sys
evals = [j for j in map(json.loads, open(sys.argv[1])) if j.get("type") == "eval"]
h = float(open(sys.argv[2]).read().split()[0])
v = evals[-1]["val_loss"]
print("demo: val loss %.3f nats/token after %d steps; unigram entropy of the val text %.3f nats/token "
      "(%.2f below it: the model uses context)" % (v, evals[-1]["step"], h, h - v))
PY

echo "--- sample_gpt (prompt \"The\", top-k 40):"
"$apps/sample_gpt" --checkpoint "$(ls -v "$out"/ckpt/step_*.safetensors | tail -n 1)" --tokens 120 \
  --prompt "The" --top-k 40
echo "demo: metrics in $out/metrics.jsonl, loss curve in $out/loss.svg"
