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
# flip_data_byte FILE: damages one byte of the tensor data (3 bytes before the end) in place.
flip_data_byte() {
  python3 - "$1" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-3, 2)
    b = f.read(1)
    f.seek(-3, 2)
    f.write(bytes([b[0] ^ 0x5A]))
PY
}
# A checkpoint whose data was damaged after it was written: sample_gpt refuses it, naming the file
# and the checksum (it used to load it and print garbage with status 0); --no-verify skips the check.
bad="$work/straight/bad.safetensors"  # beside config.json, which gives sample_gpt the shape
cp "$ckpt" "$bad"
flip_data_byte "$bad"
if out=$("$bin/sample_gpt" --checkpoint "$bad" --prompt-ids 1,2,3 --tokens 5 --temperature 0 --threads 1 2>&1); then
  echo "sample_gpt sampled from a corrupt checkpoint: $out"; exit 1
fi
case "$out" in *"bad.safetensors"*"checksum mismatch"*) ;; *) echo "sample_gpt: unexpected error: $out"; exit 1 ;; esac
"$bin/sample_gpt" --checkpoint "$bad" --prompt-ids 1,2,3 --tokens 5 --temperature 0 --threads 1 --no-verify >/dev/null
# --resume with a damaged newest checkpoint: set aside, resumed from the one before (not a failure).
cp -r "$work/split" "$work/damaged"  # step_10 (the stop) and step_20
flip_data_byte "$work/damaged/step_20.safetensors"
out=$("$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/damaged" --metrics "$work/damaged.jsonl" --resume)
echo "$out" | grep -q "resumed from .*step_10.safetensors" || { echo "resume did not fall back to step 10: $out"; exit 1; }
echo "$out" | grep -q "checkpoint not used: step_20.safetensors: its data does not match its checksum" || { echo "no reason given: $out"; exit 1; }
test -f "$work/damaged/step_20.safetensors.corrupt"
# --checkpoint-every keeps the last 2, the final checkpoint included: 5 and 10 automatic, 12 at the
# end -> step_10 and step_12 stay.
"$bin/train_gpt" "${tiny_gpt[@]}" --steps 12 --warmup-steps 3 --lr 3e-3 --log-every 6 --checkpoint-every 5 \
  --checkpoint-dir "$work/pruned" >/dev/null
kept=$(cd "$work/pruned" && ls step_*.safetensors | sort -V | tr '\n' ' ')
[ "$kept" = "step_10.safetensors step_12.safetensors " ] || { echo "kept: $kept (expected step_10 and step_12)"; exit 1; }
# A full disk (/dev/full) under --loss-svg and --metrics: a non-zero exit naming the file and the
# system's reason (it used to exit 0 leaving a 0-byte plot; the metrics error gave no reason).
short=("${tiny_gpt[@]}" --steps 2 --warmup-steps 1)
if out=$("$bin/train_gpt" "${short[@]}" --loss-svg /dev/full 2>&1); then echo "--loss-svg /dev/full exited 0"; exit 1; fi
case "$out" in *"writing the loss curve /dev/full failed: No space left on device"*) ;;
  *) echo "--loss-svg /dev/full: unexpected output: $out"; exit 1 ;; esac
if out=$("$bin/train_gpt" "${short[@]}" --metrics /dev/full 2>&1); then echo "--metrics /dev/full exited 0"; exit 1; fi
case "$out" in *"writing the metrics file /dev/full failed: No space left on device"*) ;;
  *) echo "--metrics /dev/full: unexpected output: $out"; exit 1 ;; esac
"$bin/train_gpt" "${short[@]}" --loss-svg "$work/loss.svg" >/dev/null
grep -q "</svg>" "$work/loss.svg"
test ! -e "$work/loss.svg.tmp"
# A shard truncated in place while train_gpt reads it (Note [Shards changed under a run]): exit 1
# with one error naming the file, the byte offset and the step; it used to die by SIGBUS (135).
mkdir -p "$work/cut" && cp "$work/data/train_000000.bin" "$work/cut/"
"$bin/train_gpt" --train "$work/cut/train_*.bin" "${tiny_gpt[@]:2}" --steps 100000 --warmup-steps 3 --log-every 1 \
  >"$work/cut.out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "^step *3/" "$work/cut.out" && break; sleep 0.05; done
truncate -s 1224 "$work/cut/train_000000.bin"  # the header and 100 of its 180000 tokens left
rc=0
wait "$pid" || rc=$?
[ "$rc" = 1 ] || { echo "train_gpt on a truncated shard: exit status $rc, expected 1"; tail -3 "$work/cut.out"; exit 1; }
grep -q "train_gpt: token shard .*cut/train_000000.bin: reading tokens .* at byte offset .*the file has 1224 bytes now.*(train_gpt step [0-9]*)" \
  "$work/cut.out" || { echo "train_gpt on a truncated shard: no named error"; tail -3 "$work/cut.out"; exit 1; }
# Note [Metrics before the checkpoint]: step 4's metrics line is on disk before step 4's checkpoint
# is written. A save that fails at step 4 (a folder where its .tmp file goes) stands in for a kill
# between the two: the run ends with step 4 in the metrics file (it used to be missing for good).
mkdir -p "$work/order/step_4.safetensors.tmp"
if "$bin/train_gpt" "${tiny_gpt[@]}" --steps 8 --warmup-steps 1 --log-every 1 --checkpoint-every 4 \
    --checkpoint-dir "$work/order" --metrics "$work/order.jsonl" >"$work/order.out" 2>&1; then
  echo "train_gpt saved step 4 into a folder"; exit 1
fi
grep -q '"step":4,' "$work/order.jsonl" || { echo "step 4's metrics line was not written before its checkpoint"; exit 1; }
