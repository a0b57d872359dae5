#!/usr/bin/env bash
# train_gpt --param-dtype bf16 (Note [Master weights]: bf16 parameters and gradients, f32 master
# weights and moments in each rank's shard): gpt-tiny's loss curve follows the f32 one within the
# bound the AMP curves use (tests/optim/test_amp_training.cpp: 2% per logged step); 2 ranks under
# zero2 and full follow the one-process policy run within the same bound (their bf16 gradient sums
# round in another order); the checkpoint's parameters are f32 master weights, and an f32 run resumes
# from it. Usage: gpt_mixed_precision.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 400000
common=(--train "$work/data/train_*.bin" --model gpt-tiny --batch-size 4 --seq-len 64 --total-batch-tokens 512
        --threads 1 --warmup-steps 4 --lr 3e-3 --log-every 4)
"$bin/train_gpt" "${common[@]}" --steps 40 --dtype f32 --metrics "$work/f32.jsonl" >/dev/null
"$bin/train_gpt" "${common[@]}" --steps 40 --dtype bf16 --param-dtype bf16 --metrics "$work/policy.jsonl" \
  --checkpoint-dir "$work/policy" >/dev/null
two_ranks "${common[@]}" --steps 40 --dtype bf16 --param-dtype bf16 --sharding zero2 --metrics "$work/zero2.jsonl" >/dev/null
two_ranks "${common[@]}" --steps 40 --dtype bf16 --param-dtype bf16 --reduce-dtype f32 --sharding full \
  --metrics "$work/full.jsonl" >/dev/null
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
    return [r["loss"] for r in rows if r.get("type") == "train"]
f32, policy = losses("f32"), losses("policy")
assert len(f32) == len(policy) == 11, (f32, policy)
assert f32[-1] < f32[0], f"f32 did not learn: {f32}"
def gap(a, b):
    return max(abs(x - y) / y for x, y in zip(a, b))
assert gap(policy, f32) < 0.02, f"bf16 policy vs f32: {gap(policy, f32):.4f} ({policy} vs {f32})"
for name in ("zero2", "full"):
    got = losses(name)
    assert len(got) == len(policy) and gap(got, policy) < 0.02, f"{name} vs one process: {got} vs {policy}"
print(f"bf16 policy vs f32: largest per-step gap {gap(policy, f32):.2e}; zero2 {gap(losses('zero2'), policy):.2e}, "
      f"full {gap(losses('full'), policy):.2e} vs one process")
PY
# The final checkpoint holds f32 parameters (the master weights): an f32 run continues from it.
python3 - "$work/policy/step_40.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
dtypes = {k: v["dtype"] for k, v in header.items() if k.startswith("model.")}
assert dtypes and all(d == "F32" for d in dtypes.values()), dtypes
PY
"$bin/train_gpt" "${common[@]}" --steps 44 --dtype f32 --checkpoint-dir "$work/policy" --resume \
  --metrics "$work/resumed.jsonl" >"$work/resumed.txt"
grep -q "step    44/44" "$work/resumed.txt"  # not a pipe: grep -q's early exit would SIGPIPE train_gpt (pipefail)
