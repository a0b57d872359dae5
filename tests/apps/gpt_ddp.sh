#!/usr/bin/env bash
# Two ranks (kiln-run, Gloo) with no accumulation must train like one process accumulating two
# micro-batches over the same tokens: same losses and final weights within 1e-5; also with
# activation checkpointing (--recompute), whose re-entrant backward must feed DDP's hooks the same.
# Usage: gpt_ddp.sh BIN_DIR WORK_DIR
set -euo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$bin/kiln-make-shards" --synthetic --tokens 200000 --out "$work/data" >/dev/null
common=(--train "$work/data/train_*.bin" --n-layer 1 --n-embd 32 --batch-size 4 --seq-len 32
        --total-batch-tokens 256 --steps 12 --warmup-steps 3 --lr 3e-3 --log-every 1 --threads 1)
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/one" --metrics "$work/one.jsonl" | grep "accum 2" >/dev/null
"$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/two" \
  --metrics "$work/two.jsonl" | grep "world 2 x B 4 x T 32 x accum 1" >/dev/null
python3 "$here/jsonl_losses.py" close "$work/one.jsonl" "$work/two.jsonl" \
  "$work/one/step_12.safetensors" "$work/two/step_12.safetensors" 1e-5
"$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" "${common[@]}" --recompute \
  --checkpoint-dir "$work/two_recompute" --metrics "$work/two_recompute.jsonl" >/dev/null
python3 "$here/jsonl_losses.py" close "$work/one.jsonl" "$work/two_recompute.jsonl" \
  "$work/one/step_12.safetensors" "$work/two_recompute/step_12.safetensors" 1e-5
