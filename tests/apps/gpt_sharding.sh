#!/usr/bin/env bash
# train_gpt --sharding: two ranks (kiln-run, Gloo) under zero1 and zero2 train like one process
# accumulating two micro-batches (losses and final weights within 1e-5); a zero2 run stopped after
# step 6 with --sharded-checkpoints (a shard per rank + rank 0's index) resumes as ONE process
# without sharding and ends at the same weights.
# Usage: gpt_sharding.sh BIN_DIR WORK_DIR
set -euo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$bin/kiln-make-shards" --synthetic --tokens 200000 --out "$work/data" >/dev/null
common=(--train "$work/data/train_*.bin" --n-layer 1 --n-embd 32 --batch-size 4 --seq-len 32
        --total-batch-tokens 256 --steps 12 --warmup-steps 3 --lr 3e-3 --log-every 1 --threads 1 --grad-clip 1.0)
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/one" --metrics "$work/one.jsonl" >/dev/null
for mode in zero1 zero2; do
  "$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" "${common[@]}" --sharding $mode \
    --checkpoint-dir "$work/$mode" --metrics "$work/$mode.jsonl" >/dev/null
  python3 "$here/jsonl_losses.py" close "$work/one.jsonl" "$work/$mode.jsonl" \
    "$work/one/step_12.safetensors" "$work/$mode/step_12.safetensors" 1e-5
done
"$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" "${common[@]}" --sharding zero2 \
  --sharded-checkpoints --stop-after 6 --checkpoint-dir "$work/split" --metrics "$work/split.jsonl" >/dev/null
test -f "$work/split/step_6.safetensors.shard-0-of-2" && test -f "$work/split/step_6.safetensors.shard-1-of-2"
"$bin/train_gpt" "${common[@]}" --resume --checkpoint-dir "$work/split" --metrics "$work/split.jsonl" >/dev/null
python3 "$here/jsonl_losses.py" close "$work/one.jsonl" "$work/split.jsonl" \
  "$work/one/step_12.safetensors" "$work/split/step_12.safetensors" 1e-5
