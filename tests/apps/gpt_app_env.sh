# Sourced first by the gpt_*.sh app tests (each run as `gpt_X.sh BIN_DIR WORK_DIR`): strict mode,
# $bin (the built executables), $work (emptied) and $here (this folder, for jsonl_losses.py),
# and the steps those tests share.
set -euo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work" && mkdir -p "$work"

# make_shards TOKENS [FLAGS...]: kiln-make-shards' synthetic corpus of TOKENS tokens in $work/data.
make_shards() {
  "$bin/kiln-make-shards" --synthetic --tokens "$1" "${@:2}" --out "$work/data" >/dev/null
}

# The 1-layer, 32-wide GPT on $work/data (batch 4 x 32 tokens, 256 tokens per step: 2 micro-batches
# in one process, 1 per rank on 2 ranks) that the DDP, resume, sharding and fp16 tests train.
tiny_gpt=(--train "$work/data/train_*.bin" --n-layer 1 --n-embd 32 --batch-size 4 --seq-len 32
          --total-batch-tokens 256 --threads 1)

# two_ranks ARGS...: train_gpt ARGS on 2 Gloo ranks under kiln-run.
two_ranks() {
  "$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" "$@"
}

# same_run A B STEP TOL: the runs whose metrics are $work/A.jsonl and $work/B.jsonl logged the same
# losses and ended at the same weights (checkpoints $work/A/step_STEP and $work/B/step_STEP) within TOL.
same_run() {
  python3 "$here/jsonl_losses.py" close "$work/$1.jsonl" "$work/$2.jsonl" \
    "$work/$1/step_$3.safetensors" "$work/$2/step_$3.safetensors" "$4"
}
