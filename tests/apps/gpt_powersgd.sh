#!/usr/bin/env bash
# gpt-tiny (1 layer of 64 dims) on 2 Gloo ranks trained with the PowerSGD comm hook (rank 4, error
# feedback, warm start, plain all-reduce for the first 10 steps) ends within 0.05 nats of the same
# run with plain all-reduce (final validation loss); and the fp16 compression hook too.
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
python3 "$here/jsonl_losses.py" final_val "$work/none.jsonl" "$work/powersgd.jsonl" 0.05
python3 "$here/jsonl_losses.py" final_val "$work/none.jsonl" "$work/fp16.jsonl" 0.05
