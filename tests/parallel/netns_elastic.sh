#!/usr/bin/env bash
# Elastic kiln-run on several "hosts" of one machine: each host is a Linux network namespace with
# its own address (10.201.0.<i>) on a bridge, running one kiln-run agent with one train_gpt
# worker; host 1 owns the rendezvous endpoint, so its agent hosts the store. Needs root (ip netns);
# where namespaces are not permitted the test exits 77, which CTest reports as skipped.
# Usage: netns_elastic.sh BIN_DIR WORK_DIR SCENARIO [RUNS]
#   kill_worker   kill -9 one worker at a random step (--max-restarts 0): every agent exits
#                 non-zero within the bound, naming the dead rank and its host
#   kill_agent    kill -9 one host's agent (alternately the store host and the other)
#   restart       kill -9 a worker with --max-restarts 2: the job finishes and its per-step losses
#                 equal an uninterrupted run's, bit for bit
#   leave         3 hosts (--nnodes 2:3), one host's agent killed: the other two finish at world size 2
#   partial_ckpt  a checkpoint on only one host's disk is not used: the older common one is
#   token_flood   KILN_STORE_TOKEN set: an agent with a wrong token is refused naming it, a flood of
#                 connections is refused, and the job finishes
# RUNS repeats the kill scenarios (e.g. 20 to look for hangs); CI runs each once.
set -uo pipefail
bin=$1 work=$2 scenario=$3 runs=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
bound=${KILN_TEST_EXIT_BOUND:-15}  # seconds for every survivor to exit or restart after a kill
p="kt$$"                           # namespace prefix, unique per test process
port=29400

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$work"/h*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 25 "$f"; }; done; exit 1; }

[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
ip netns add "${p}sw" 2>/dev/null || skip "network namespaces are not permitted here (ip netns add failed)"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for ns in $(ip netns list | awk '{print $1}' | grep "^${p}"); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
}
trap cleanup EXIT

ip -n "${p}sw" link set lo up
ip -n "${p}sw" link add br0 type bridge || skip "bridge devices are not permitted here (no bridge module?)"
ip -n "${p}sw" link set br0 up
for i in 1 2 3; do
  ip netns add "${p}h$i" || fail "cannot create namespace ${p}h$i"
  ip -n "${p}h$i" link set lo up
  ip link add eth0 netns "${p}h$i" type veth peer name "port$i" netns "${p}sw" || skip "veth pairs are not permitted here"
  ip -n "${p}h$i" addr add "10.201.0.$i/24" dev eth0
  ip -n "${p}h$i" link set eth0 up
  ip -n "${p}sw" link set "port$i" master br0
  ip -n "${p}sw" link set "port$i" up
done

rm -rf "$work" && mkdir -p "$work"
"$bin/kiln-make-shards" --synthetic --tokens 100000 --out "$work/data" >/dev/null || fail "kiln-make-shards"
steps=${KILN_TEST_STEPS:-300} every=10
[ "$scenario" = partial_ckpt ] && steps=10 every=4
tokens=256
[ "$scenario" = leave ] && tokens=768  # 3 ranks x 2 micro-batches of 4 x 32, or 2 ranks x 3
gpt=(--train "$work/data/train_*.bin" --n-layer 1 --n-embd 32 --batch-size 4 --seq-len 32 --total-batch-tokens "$tokens"
     --steps "$steps" --warmup-steps 3 --lr 3e-3 --log-every 1 --threads 1 --checkpoint-every "$every")

# agent HOST NNODES MAX_RESTARTS LOG [extra env...] -- [train_gpt args]: starts host's kiln-run in the
# background; its pid is left in $agent_pid.
agent() {
  local host=$1 nnodes=$2 restarts=$3 log=$4
  shift 4
  local envs=() conf=last_call_timeout=1,heartbeat_timeout=3,join_timeout=30,max_connections=64
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  ip netns exec "${p}h$host" env "${envs[@]}" "$bin/kiln-run" --nnodes "$nnodes" \
    --rdzv-endpoint "10.201.0.1:$port" --rdzv-id job --max-restarts "$restarts" --rdzv-bind '*' \
    --rdzv-conf "$conf" --stop-grace 2 \
    "$bin/train_gpt" "$@" >"$log" 2>&1 &
  agent_pid=$!
  pids+=("$agent_pid")
}

# The newest step rank 0 logged in metrics file $1 (0 when none yet).
last_step() { grep -o '"step": *[0-9]*' "$1" 2>/dev/null | tail -n 1 | grep -o '[0-9]*$' || echo 0; }

wait_step() {  # FILE STEP TIMEOUT_S
  local t=0
  while [ "$(last_step "$1")" -lt "$2" ]; do
    sleep 0.2; t=$((t + 1))
    [ $t -lt $(($3 * 5)) ] || fail "step $2 not reached within $3 s"
  done
}

# Waits for pid $1 (a child of this shell) up to $2 s; sets $st to its exit status, or "hung".
wait_exit() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.1; t=$((t + 1))
    if [ $t -ge $((limit * 10)) ]; then st=hung; return; fi
  done
  wait "$pid"; st=$?
}

# The worker (train_gpt) under agent pid $1.
worker_of() { pgrep -P "$1" -x train_gpt | head -n 1; }

random_step() { echo $((3 + RANDOM % (steps / 2))); }

run_kill() {  # worker|agent RUN
  local what=$1 run=$2 dir="$work/run$run"
  mkdir -p "$dir"
  agent 1 2 0 "$work/h1.log" -- "${gpt[@]}" --checkpoint-dir "$dir/ckpt" --metrics "$dir/m.jsonl"
  local a1=$agent_pid
  agent 2 2 0 "$work/h2.log" -- "${gpt[@]}" --checkpoint-dir "$dir/ckpt" --metrics "$dir/m.jsonl"
  local a2=$agent_pid
  local at; at=$(random_step)
  wait_step "$dir/m.jsonl" "$at" 60
  local victim=2 survivor=$a1 victim_agent=$a2
  if [ "$what" = agent ] && [ $((run % 2)) = 0 ]; then victim=1 survivor=$a2 victim_agent=$a1; fi
  local t0; t0=$(date +%s.%N)
  if [ "$what" = worker ]; then
    local w; w=$(worker_of "$victim_agent")
    [ -n "$w" ] || fail "no worker under host $victim's agent"
    kill -9 "$w"
  else
    kill -9 "$victim_agent"
  fi
  wait_exit "$survivor" "$bound"
  local took; took=$(echo "$(date +%s.%N) - $t0" | bc)
  [ "$st" != hung ] || fail "run $run: the surviving agent did not exit within $bound s of the kill ($what on host $victim)"
  [ "$st" != 0 ] || fail "run $run: the surviving agent exited 0 after a failure"
  local slog="$work/h$((3 - victim)).log"
  if [ "$what" = worker ]; then
    # Ranks follow the join order: read the victim's from its agent's generation line.
    local vrank; vrank=$(grep -o 'ranks [0-9]*' "$work/h$victim.log" | head -n 1 | grep -o '[0-9]*$')
    grep -q "rank $vrank .*failed: killed by SIGKILL" "$slog" || fail "run $run: the survivor's log does not name rank $vrank killed by SIGKILL"
    grep -q "10.201.0.$victim" "$slog" || fail "run $run: the survivor's log does not name host 10.201.0.$victim"
    local sst=$st; wait_exit "$victim_agent" "$bound"
    [ "$st" != hung ] && [ "$st" != 0 ] || fail "run $run: the victim host's agent did not fail ($st)"
    # The healthy host's agent stopped its workers and left the generation: it did not vanish.
    ! grep -q "10.201.0.$((3 - victim)).*stopped responding" "$work/h$victim.log" ||
      fail "run $run: host $victim's log says the healthy host 10.201.0.$((3 - victim)) stopped responding"
    st=$sst
  elif [ "$victim" = 1 ]; then
    grep -q "lost the rendezvous store at 10.201.0.1:$port" "$slog" || fail "run $run: the survivor does not say it lost the store host"
  else
    grep -Eq "10.201.0.2.*(failed|stopped responding)" "$slog" || fail "run $run: the survivor does not name host 10.201.0.2"
  fi
  sleep 0.5
  if ip netns pids "${p}h$victim" | grep -q .; then fail "run $run: processes left on host $victim after its agent died"; fi
  echo "run $run: kill -9 $what on host $victim at step $at: survivor exited ($st) after ${took}s"
}

case "$scenario" in
  kill_worker|kill_agent)
    for run in $(seq 1 "$runs"); do run_kill "${scenario#kill_}" "$run"; done ;;
  restart)
    # The reference: the same two ranks, uninterrupted, by the static launcher on this machine.
    "$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" "${gpt[@]}" --checkpoint-dir "$work/ref" \
      --metrics "$work/ref.jsonl" >"$work/ref.log" 2>&1 || fail "the uninterrupted run failed"
    agent 1 2 2 "$work/h1.log" -- "${gpt[@]}" --resume --checkpoint-dir "$work/ckpt" --metrics "$work/m.jsonl"
    a1=$agent_pid
    agent 2 2 2 "$work/h2.log" -- "${gpt[@]}" --resume --checkpoint-dir "$work/ckpt" --metrics "$work/m.jsonl"
    a2=$agent_pid
    at=$(random_step); wait_step "$work/m.jsonl" "$at" 60
    kill -9 "$(worker_of "$a2")"
    for a in $a1 $a2; do
      wait_exit "$a" 120; [ "$st" = 0 ] || fail "an agent ended with $st after the restart"
    done
    grep -q "restarting the workers in a new generation (restart 1 of 2)" "$work/h1.log" || fail "no restart logged"
    grep -q "resumed from" "$work/h1.log" "$work/h2.log" || fail "the restarted workers did not resume from a checkpoint"
    # Every step the interrupted job logged has the reference's loss bit for bit, and only a step
    # whose checkpoint was written just before the kill may lack its line (train_gpt logs a step
    # after checkpointing it, and resumes after it).
    python3 - "$work/ref.jsonl" "$work/m.jsonl" "$steps" <<'PY' || fail "losses differ from the uninterrupted run"
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "loss" in r and "step" in r: out[r["step"]] = r["loss"]
    return out
ref, got, steps = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
assert len(ref) == steps, f"the reference logged {len(ref)} of {steps} steps"
bad = [s for s in got if got[s] != ref.get(s)]
missing = sorted(set(ref) - set(got))
print(f"{len(got)} steps compared, missing {missing}, differing {bad[:5]}")
sys.exit(1 if bad or len(missing) > 1 or any(s % 10 for s in missing) else 0)
PY
    echo "killed rank 1 at step $at; restarted; every logged loss equals the uninterrupted run's" ;;
  leave)
    for h in 1 2 3; do
      agent "$h" 2:3 1 "$work/h$h.log" -- "${gpt[@]}" --resume --checkpoint-dir "$work/ckpt" --metrics "$work/m.jsonl"
      eval "a$h=$agent_pid"
    done
    at=$(random_step); wait_step "$work/m.jsonl" "$at" 60
    grep -q "world size 3" "$work/h1.log" || fail "the first generation did not have 3 hosts"
    kill -9 "$a3"
    for a in $a1 $a2; do
      wait_exit "$a" 120; [ "$st" = 0 ] || fail "an agent ended with $st after host 3 left"
    done
    grep -q "generation 1: .* of world size 2" "$work/h1.log" || fail "no generation of world size 2 after host 3 left"
    [ "$(last_step "$work/m.jsonl")" = "$steps" ] || fail "the job did not reach step $steps"
    echo "host 3 left at step $at; hosts 1 and 2 finished all $steps steps at world size 2" ;;
  partial_ckpt)
    # Checkpoints of steps 4 and 8 on host 1's disk, only step 4 on host 2's.
    "$bin/train_gpt" "${gpt[@]}" --stop-after 8 --checkpoint-dir "$work/made" >/dev/null 2>&1 ||
      fail "making the checkpoints failed"
    mkdir -p "$work/disk1" "$work/disk2"
    cp "$work/made/step_4.safetensors" "$work/made/step_8.safetensors" "$work/disk1/"
    cp "$work/made/step_4.safetensors" "$work/disk2/"
    agent 1 2 0 "$work/h1.log" -- "${gpt[@]}" --resume --checkpoint-dir "$work/disk1"
    a1=$agent_pid
    agent 2 2 0 "$work/h2.log" -- "${gpt[@]}" --resume --checkpoint-dir "$work/disk2"
    a2=$agent_pid
    for a in $a1 $a2; do wait_exit "$a" 120; [ "$st" = 0 ] || fail "an agent ended with $st"; done
    # Rank 0 (which prints) is on whichever host joined first.
    grep -Eq "checkpoint not used: step_8.safetensors: missing on rank\(s\) [01]$" "$work/h1.log" "$work/h2.log" ||
      fail "step 8 not reported as skipped"
    grep -Eq "resumed from $work/disk[12]/step_4.safetensors at step 4" "$work/h1.log" "$work/h2.log" ||
      fail "did not resume from the common step 4"
    echo "step_8 (host 1 only) skipped with a message; both hosts resumed from step 4" ;;
  token_flood)
    agent 1 2 0 "$work/h1.log" KILN_STORE_TOKEN=s3cret -- "${gpt[@]}" --checkpoint-dir "$work/ckpt" --metrics "$work/m.jsonl"
    a1=$agent_pid
    agent 2 2 0 "$work/h2.log" KILN_STORE_TOKEN=s3cret -- "${gpt[@]}" --checkpoint-dir "$work/ckpt" --metrics "$work/m.jsonl"
    a2=$agent_pid
    wait_step "$work/m.jsonl" 3 60
    # An agent with the wrong token, from host 3: refused at once, naming the token.
    agent 3 2:3 0 "$work/h3.log" KILN_STORE_TOKEN=guess -- "${gpt[@]}"
    wait_exit "$agent_pid" 20; [ "$st" != hung ] && [ "$st" != 0 ] || fail "the wrong-token agent was not refused ($st)"
    grep -q "wrong store token" "$work/h3.log" || fail "the refusal does not name the wrong token"
    # 300 connections from host 3 that never present a token; the store takes 64 at most.
    refused=$(ip netns exec "${p}h3" python3 -c '
import socket, sys
socks, refused = [], 0
for _ in range(300):
    s = socket.socket(); s.settimeout(3); s.connect(("10.201.0.1", int(sys.argv[1]))); socks.append(s)
for s in socks:
    try:
        refused += b"too many connections" in s.recv(512)
    except OSError:
        pass
print(refused)' "$port") || fail "the flood could not connect"
    [ "$refused" -ge 230 ] || fail "only $refused of 300 flood connections were refused naming the limit"
    for a in $a1 $a2; do wait_exit "$a" 120; [ "$st" = 0 ] || fail "an agent ended with $st after the flood"; done
    [ "$(last_step "$work/m.jsonl")" = "$steps" ] || fail "the job did not reach step $steps"
    echo "wrong token refused; $refused of a 300-connection flood refused; the job finished all $steps steps" ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
esac
