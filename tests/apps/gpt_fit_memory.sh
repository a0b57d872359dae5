#!/usr/bin/env bash
# train_gpt --fit-memory GiB (apps/gpt/fit_memory.h) end to end: the plan printed before training
# (micro-batch x grad accum x world, recompute, the predicted peak and its terms), the global batch
# of the flags kept, a budget between two micro-batches' peaks choosing the smaller one and training
# bit for bit as those flags written by hand, a budget nothing fits refused naming the smallest plan,
# and 2 ranks under zero2 planning per rank and printing once. Usage: gpt_fit_memory.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 200000
# tiny_gpt asks for 256 tokens per step of 32: 8 sequences. Predicted peaks (single process, no
# recompute): 1.2 MiB at micro-batch 8, 876 KiB at 4, 650 KiB at 2, 537 KiB at 1.
common=("${tiny_gpt[@]}" --steps 3 --warmup-steps 1 --lr 3e-3 --log-every 1)
expect() {  # expect FILE TEXT: FILE holds the line TEXT (fixed string)
  grep -qF -- "$2" "$1" || { echo "missing '$2' in:"; cat "$1"; exit 1; }
}

"$bin/train_gpt" "${common[@]}" --fit-memory 1 > "$work/big.out"
expect "$work/big.out" "fit-memory: micro-batch 8 x grad accum 1 x world 1 = 8 sequences per step, recompute none"
expect "$work/big.out" "at the start of backward (budget 1.00 GiB; sharding none"
expect "$work/big.out" "fit-memory: by term (each at its largest): activations"
expect "$work/big.out" "world 1 x B 8 x T 32 x accum 1 = 256 tokens/step"
# The plan comes before the first step.
plan_line=$(grep -n "^fit-memory: micro-batch" "$work/big.out" | cut -d: -f1)
step_line=$(grep -n "^step " "$work/big.out" | head -1 | cut -d: -f1)
[ "$plan_line" -lt "$step_line" ] || { echo "the plan is printed after training started"; cat "$work/big.out"; exit 1; }

# 1 MiB: micro-batch 8 (1.2 MiB) is over, 4 fits: 2 accumulated micro-batches, trained exactly as tiny_gpt's own -b 4.
"$bin/train_gpt" "${common[@]}" --fit-memory 0.0009765625 --checkpoint-dir "$work/fit" --metrics "$work/fit.jsonl" \
  > "$work/fit.out"
expect "$work/fit.out" "fit-memory: micro-batch 4 x grad accum 2 x world 1 = 8 sequences per step, recompute none"
expect "$work/fit.out" "world 1 x B 4 x T 32 x accum 2 = 256 tokens/step"
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/hand" --metrics "$work/hand.jsonl" >/dev/null
same_run fit hand 3 0
# --recompute given is kept: only the micro-batch is chosen.
"$bin/train_gpt" "${common[@]}" --fit-memory 0.0009765625 --recompute mlp > "$work/mlp.out"
expect "$work/mlp.out" "grad accum 2 x world 1 = 8 sequences per step, recompute mlp"

# Nothing fits 100 KiB: one line naming the smallest peak and its plan, a non-zero exit.
if "$bin/train_gpt" "${common[@]}" --fit-memory 0.0001 > "$work/none.out" 2> "$work/none.err"; then
  echo "--fit-memory 0.0001 trained"; exit 1
fi
expect "$work/none.err" "no plan for 8 sequences per step"
grep -qE "the smallest predicted peak per rank is [0-9.]+ KiB \(micro-batch 1, grad accum 8, recompute [a-z]+\)" \
  "$work/none.err" || { echo "the refusal does not name the smallest plan:"; cat "$work/none.err"; exit 1; }
[ "$(wc -l < "$work/none.err")" = 1 ] || { echo "expected one error line:"; cat "$work/none.err"; exit 1; }
if grep -q "^step " "$work/none.out"; then echo "a step ran after the refusal"; exit 1; fi

# Two ranks, ZeRO-2: 4 sequences per rank, the plan for world 2 and zero2 printed once (by rank 0;
# kiln-run prefixes "[rank 0] ").
two_ranks "${common[@]}" --sharding zero2 --fit-memory 1 > "$work/two.out"
expect "$work/two.out" "fit-memory: micro-batch 4 x grad accum 1 x world 2 = 8 sequences per step, recompute none"
expect "$work/two.out" "sharding zero2"
[ "$(grep -c "fit-memory: micro-batch" "$work/two.out")" = 1 ] || { echo "the plan is not printed once"; exit 1; }
echo "gpt_fit_memory: all checks passed"
