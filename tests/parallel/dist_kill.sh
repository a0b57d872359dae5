#!/bin/sh
# A rank that dies mid-training must fail the whole job quickly and say which rank died:
# kiln-run exits non-zero within 30 s, and the output names rank 1 both in kiln-run's report and
# in the surviving rank's collective error. Usage: dist_kill.sh KILN_RUN DIST_WORKER
kiln_run=$1
worker=$2
name=dist_kill
. "$(dirname "$0")/dist_job.sh"
run_job "$kiln_run" --nproc-per-node 2 --standalone "$worker" kill
[ "$status" -ne 0 ] || fail "kiln-run exited 0 although rank 1 died"
[ "$elapsed" -le 30 ] || fail "kiln-run took ${elapsed} s (limit 30 s)"
grep -q "rank 1" "$out" || fail "the output does not name rank 1"
grep -q "rank 0 failed as expected, naming rank 1" "$out" || fail "rank 0 did not report a collective error naming rank 1"
echo "dist_kill: ok (kiln-run exited $status after ${elapsed} s)"
