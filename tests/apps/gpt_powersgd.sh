#!/usr/bin/env bash
# gpt-tiny (1 layer of 64 dims) on 2 Gloo ranks with comm hooks against plain all-reduce (final
# validation loss, issue #20's 0.05 nats): fp16 compression, and PowerSGD at rank 4 with error
# feedback and warm start, reducing by plain all-reduce for the first 100 of 150 steps (measured
# 0.027 nats worse). This corpus (copy the token `lag` places back) is learnt after a plateau
# (all-reduce: 5.39 at step 50, 4.85 at 100, 4.62 at 150; floor 3.45), so a slower start costs a lot: PowerSGD from step 10 ended 0.41 nats worse at rank 4 and 0.095 at
# rank 16, although the hook equals torch's powerSGD_hook (parity_powersgd) and reproduces the
# average at full rank (parallel_powersgd). README, "Kiln vs PyTorch DDP", lists the measurements.
# Usage: gpt_powersgd.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 400000 --lags 2,3 --noise 0.5
common=(--train "$work/data/train_*.bin" --val "$work/data/val_*.bin" --n-layer 1 --n-embd 64 --batch-size 8
        --seq-len 64 --steps 150 --warmup-steps 10 --lr 1e-2 --min-lr 1e-3 --log-every 50 --eval-every 150
        --eval-tokens 16384 --threads 1)
for hook in none powersgd fp16; do
  two_ranks "${common[@]}" --comm-hook $hook \
    --powersgd-rank 4 --powersgd-start 100 --metrics "$work/$hook.jsonl" >"$work/$hook.log"
done
python3 "$here/jsonl_losses.py" final_val "$work/none.jsonl" "$work/powersgd.jsonl" 0.05
python3 "$here/jsonl_losses.py" final_val "$work/none.jsonl" "$work/fp16.jsonl" 0.05
