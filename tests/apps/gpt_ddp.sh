#!/usr/bin/env bash
# Two ranks (kiln-run, Gloo) with no accumulation must train like one process accumulating two
# micro-batches over the same tokens: same losses and final weights within 1e-5; also with
# activation checkpointing (--recompute), whose re-entrant backward must feed DDP's hooks the same.
# Usage: gpt_ddp.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 200000
common=("${tiny_gpt[@]}" --steps 12 --warmup-steps 3 --lr 3e-3 --log-every 1)
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/one" --metrics "$work/one.jsonl" | grep "accum 2" >/dev/null
two_ranks "${common[@]}" --checkpoint-dir "$work/two" --metrics "$work/two.jsonl" \
  | grep "world 2 x B 4 x T 32 x accum 1" >/dev/null
same_run one two 12 1e-5
two_ranks "${common[@]}" --recompute --checkpoint-dir "$work/two_recompute" --metrics "$work/two_recompute.jsonl" >/dev/null
same_run one two_recompute 12 1e-5
