#!/bin/sh
# The watchdog end to end under kiln-run: rank 1 of 2 stalls at collective 8 (KILN_FAULT_INJECT),
# KILN_DIST_TIMEOUT=3. Both ranks must fail with a DistributedError naming sequence number 8 and
# rank 1, return from main (destroying their groups) and exit, the job ending within 3 + 7 s; each
# rank's flight recorder lands in KILN_FLIGHT_RECORDER_DIR as JSON lines.
# Usage: dist_stall.sh KILN_RUN DIST_WORKER
kiln_run=$1
worker=$2
name=dist_stall
. "$(dirname "$0")/dist_job.sh"
run_job env KILN_DIST_TIMEOUT=3 KILN_FAULT_INJECT=stall:rank=1:seq=8 KILN_FLIGHT_RECORDER_DIR="$dir" \
  "$kiln_run" --nproc-per-node 2 --standalone "$worker" stall
[ "$status" -eq 0 ] || fail "kiln-run exited $status: a rank did not report the stall as expected"
[ "$elapsed" -le 10 ] || fail "the job took ${elapsed} s (timeout 3 s, limit 10 s)"
for r in 0 1; do
  grep -q "rank $r failed as expected, naming rank 1" "$out" || fail "rank $r did not report naming rank 1"
  grep "rank $r failed" "$out" | grep -q "sequence number 8" || fail "rank $r's error does not name sequence number 8"
  dump=$(ls "$dir"/kiln_flight_recorder_Gloo_rank${r}_pid*.jsonl 2>/dev/null | head -n 1)
  [ -n "$dump" ] || fail "no flight recorder dump of rank $r in $dir"
  head -n 1 "$dump" | grep -q "\"rank\":$r," || fail "the dump of rank $r has no header naming it"
  grep -q '"seq":8,"op":"allreduce"' "$dump" || fail "the dump of rank $r has no record of collective 8"
  grep '"seq":8,' "$dump" | grep -q '"state":"failed"' || fail "collective 8 is not marked failed in rank $r's dump"
done
echo "dist_stall: ok (kiln-run exited 0 after ${elapsed} s; both ranks named rank 1 and dumped)"
