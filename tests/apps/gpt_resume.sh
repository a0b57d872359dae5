#!/usr/bin/env bash
# A run stopped at step 10 and resumed from its checkpoint (--stop-after, --resume) must log the
# same losses, bit for bit, as the uninterrupted 20-step run: model, AdamW state, schedule, RNG and
# the data cursor all round-trip. Usage: gpt_resume.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 200000
common=("${tiny_gpt[@]}" --steps 20 --warmup-steps 3 --lr 3e-3 --log-every 1)
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/straight" --metrics "$work/straight.jsonl" >/dev/null
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/split" --metrics "$work/split.jsonl" --stop-after 10 >/dev/null
test -f "$work/split/step_10.safetensors"
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/split" --metrics "$work/split.jsonl" --resume | grep "resumed from" >/dev/null
python3 "$here/jsonl_losses.py" equal "$work/straight.jsonl" "$work/split.jsonl"
# sample_gpt from that checkpoint: greedy decoding with the KV cache writes the same tokens as
# recomputing the whole context (20 tokens stay inside one block, so the cache never re-primes).
ckpt="$work/straight/step_20.safetensors"
with=$("$bin/sample_gpt" --checkpoint "$ckpt" --prompt-ids 1,2,3 --tokens 20 --temperature 0 --threads 1)
without=$("$bin/sample_gpt" --checkpoint "$ckpt" --prompt-ids 1,2,3 --tokens 20 --temperature 0 --threads 1 --no-kv-cache)
[ "$with" = "$without" ] || { echo "sample_gpt: KV cache output differs: '$with' vs '$without'"; exit 1; }
