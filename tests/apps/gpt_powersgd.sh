#!/usr/bin/env bash
# gpt-tiny (1 layer of 64 dims) on 2 Gloo ranks with comm hooks against plain all-reduce (final
# validation loss): fp16 compression must end within 0.05 nats. PowerSGD (rank 4, error feedback,
# warm start, plain all-reduce for the first 10 steps) does NOT reach issue #20's 0.05 nats yet:
# measured 0.41 nats worse after 150 steps (5.016 vs 4.601); it is held to 0.5 nats so that it
# cannot get worse unnoticed.
# Usage: gpt_powersgd.sh BIN_DIR WORK_DIR
set -euo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$bin/kiln-make-shards" --synthetic --tokens 400000 --lags 2,3 --noise 0.5 --out "$work/data" >/dev/null
common=(--train "$work/data/train_*.bin" --val "$work/data/val_*.bin" --n-layer 1 --n-embd 64 --batch-size 8
        --seq-len 64 --steps 150 --warmup-steps 10 --lr 1e-2 --min-lr 1e-3 --log-every 50 --eval-every 150
        --eval-tokens 16384 --threads 1)
for hook in none powersgd fp16; do
  "$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" "${common[@]}" --comm-hook $hook \
    --metrics "$work/$hook.jsonl" >"$work/$hook.log"
done
python3 "$here/jsonl_losses.py" final_val "$work/none.jsonl" "$work/powersgd.jsonl" 0.5
python3 "$here/jsonl_losses.py" final_val "$work/none.jsonl" "$work/fp16.jsonl" 0.05
