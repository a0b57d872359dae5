#!/usr/bin/env bash
# --dtype fp16: the skipped steps are counted on the device (Note [Trainer host reads]) and each
# log line reports how many there were since the previous one. A sane run skips none; a run whose
# learning rate blows the weights up (every step after the first overflows) reports every step of
# each window as skipped. Usage: gpt_fp16.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 200000
common=("${tiny_gpt[@]}" --steps 12 --warmup-steps 1 --log-every 4 --dtype fp16)
"$bin/train_gpt" "${common[@]}" --lr 3e-3 --metrics "$work/sane.jsonl" >/dev/null
"$bin/train_gpt" "${common[@]}" --lr 3000 --metrics "$work/blown.jsonl" | grep "| skipped 4 |" >/dev/null
python3 - "$work/sane.jsonl" "$work/blown.jsonl" <<'PY'
import json, sys
def train(path):
    return [o for o in map(json.loads, open(path)) if o.get("type") == "train"]
sane, blown = train(sys.argv[1]), train(sys.argv[2])
assert [o["step"] for o in sane] == [1, 4, 8, 12], sane
assert all("skipped" not in o and "skipped_steps" not in o for o in sane), sane
# Step 1 (index 0) is clean; the windows after it hold 3, 4 and 4 steps, all skipped.
assert "skipped_steps" not in blown[0] and "skipped" not in blown[0], blown[0]
assert [o.get("skipped_steps") for o in blown[1:]] == [3, 4, 4], blown
assert all(o.get("skipped") is True for o in blown[1:]), blown
PY
