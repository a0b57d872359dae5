#!/usr/bin/env bash
# Preemption (Note [Preemption], parallel/preemption.h): SIGTERM or SIGUSR1 to a training train_gpt
# makes it finish its step, checkpoint it, flush its metrics and exit 75; --resume then logs the same
# losses, bit for bit, as the uninterrupted run: no step is lost. Alone, then on 2 ranks under
# kiln-run (SIGTERM to kiln-run, which forwards it). Usage: gpt_preempt.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 200000
# Long enough (~1 s alone) that the signal, sent once 5 steps are logged, lands before the end.
common=("${tiny_gpt[@]}" --steps 300 --warmup-steps 3 --lr 3e-3 --log-every 1)
"$bin/train_gpt" "${common[@]}" --checkpoint-dir "$work/straight" --metrics "$work/straight.jsonl" >/dev/null
two_ranks "${common[@]}" --checkpoint-dir "$work/straight2" --metrics "$work/straight2.jsonl" >/dev/null

# preempt NAME SIGNAL EXPECTED_STATUS STRAIGHT COMMAND...: start COMMAND, signal it once NAME.jsonl
# has 5 train lines, check its status and checkpoint, resume, compare the losses with STRAIGHT.
preempt() {
  local name=$1 sig=$2 expected=$3 straight=$4
  shift 4
  "$@" --checkpoint-dir "$work/$name" --metrics "$work/$name.jsonl" >"$work/$name.out" 2>&1 &
  local pid=$! n=0
  for _ in $(seq 1 1200); do
    n=$(grep -c '"type":"train"' "$work/$name.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge 5 ] && break
    sleep 0.05
  done
  kill -"$sig" "$pid"
  local rc=0
  wait "$pid" || rc=$?
  [ "$expected" = any ] || [ "$rc" = "$expected" ] ||
    { echo "$name: exit status $rc after SIG$sig, expected $expected"; cat "$work/$name.out"; exit 1; }
  grep -q "stopped by a signal after step" "$work/$name.out" ||
    { echo "$name: no stop message"; cat "$work/$name.out"; exit 1; }
  ls "$work/$name"/step_*.safetensors >/dev/null
  "$@" --checkpoint-dir "$work/$name" --metrics "$work/$name.jsonl" --resume >"$work/$name.resume.out"
  grep -q "resumed from" "$work/$name.resume.out"
  python3 "$here/jsonl_losses.py" equal "$work/$straight.jsonl" "$work/$name.jsonl"
}
preempt term TERM 75 straight "$bin/train_gpt" "${common[@]}"
preempt usr1 USR1 75 straight "$bin/train_gpt" "${common[@]}"
# kiln-run stops its workers with SIGTERM (SIGKILL after --stop-grace) and reports them stopped.
preempt ranks TERM any straight2 "$bin/kiln-run" --nproc-per-node 2 --standalone --stop-grace 30 \
  "$bin/train_gpt" "${common[@]}"
