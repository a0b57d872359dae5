#!/usr/bin/env bash
# train_gpt --sharding: two ranks (kiln-run, Gloo) under zero1, zero2 and full (FSDP, also with
# --recompute) train like one process accumulating two micro-batches (losses and final weights within
# 1e-5); zero2 and full runs stopped after step 6 with --sharded-checkpoints (a shard per rank +
# rank 0's index) resume as ONE process without sharding and end at the same weights.
# Usage: gpt_sharding.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 200000
common=("${tiny_gpt[@]}" --steps 12 --warmup-steps 3 --lr 3e-3 --log-every 1 --grad-clip 1.0)
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/one" --metrics "$work/one.jsonl" >/dev/null
for mode in zero1 zero2 full full-recompute; do
  flags=(--sharding "${mode%-recompute}")
  [[ $mode == *-recompute ]] && flags+=(--recompute)
  two_ranks "${common[@]}" "${flags[@]}" --checkpoint-dir "$work/$mode" --metrics "$work/$mode.jsonl" >/dev/null
  same_run one "$mode" 12 1e-5
done
for mode in zero2 full; do
  two_ranks "${common[@]}" --sharding $mode --sharded-checkpoints --stop-after 6 --checkpoint-dir "$work/split-$mode" \
    --metrics "$work/split-$mode.jsonl" >/dev/null
  test -f "$work/split-$mode/step_6.safetensors.shard-0-of-2" && test -f "$work/split-$mode/step_6.safetensors.shard-1-of-2"
  "$bin/train_gpt" "${common[@]}" --resume --checkpoint-dir "$work/split-$mode" --metrics "$work/split-$mode.jsonl" >/dev/null
  same_run one "split-$mode" 12 1e-5
done
