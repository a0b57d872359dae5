#!/bin/sh
# Two elastic kiln-run agents on one machine (no namespaces needed): the first to bind the
# endpoint hosts the store, the other connects. Checks the workers' variables (world size 2,
# ranks 0 and 1, a per-generation store prefix, the restart count) and that a failure on one
# "node" makes both restart together: the worker of generation 0 with rank 1 exits 3 while rank 0
# still runs (a node whose workers all finished leaves the job, as torchrun's agents do).
# Usage: elastic_loopback.sh KILN_RUN
set -u
kr=$1
port=$(( 20000 + $$ % 20000 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
worker='echo "rank=$RANK world=$WORLD_SIZE gen=$KILN_RDZV_GENERATION restart=$TORCHELASTIC_RESTART_COUNT prefix=$KILN_STORE_PREFIX"
        if [ "$KILN_RDZV_GENERATION" = 0 ] && [ "$RANK" = 1 ]; then sleep 0.3; exit 3; fi
        if [ "$KILN_RDZV_GENERATION" = 0 ]; then sleep 5; fi; sleep 0.3'
for n in a b; do
  "$kr" --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id loop --max-restarts 1 \
    --rdzv-conf last_call_timeout=0.5,join_timeout=20 /bin/sh -c "$worker" >"$out/$n.log" 2>&1 &
  eval "pid_$n=\$!"
done
wait "$pid_a"; st_a=$?
wait "$pid_b"; st_b=$?
cat "$out/a.log" "$out/b.log"
[ "$st_a" = 0 ] && [ "$st_b" = 0 ] || { echo "FAIL: agents exited $st_a and $st_b"; exit 1; }
all=$(cat "$out/a.log" "$out/b.log")
for want in "rank=0 world=2 gen=1 restart=1 prefix=kiln-rdzv/loop/g1/workers" "rank=1 world=2 gen=1 restart=1" \
            "rank 1 (local rank 0" "failed: exit code 3" "restarting the workers in a new generation (restart 1 of 1)" \
            "hosting the rendezvous store at 127.0.0.1:$port"; do
  echo "$all" | grep -qF "$want" || { echo "FAIL: no line with '$want'"; exit 1; }
done
echo "PASS"
