#!/bin/sh
# End-to-end checks of the kiln-run executable: exit codes, "[rank N] " output, flags after the
# program passed through, one-line errors for bad input, --help, SIGTERM forwarding.
# Usage: kiln_run_cli.sh path/to/kiln-run
K="$1"
. "$(dirname "$0")/../test_util.sh"
# expect_rc CODE ARGS...: runs kiln-run, stdout to $T/out, stderr to $T/err.
expect_rc() {
  want=$1; shift
  "$K" "$@" > "$T/out" 2> "$T/err"
  got=$?
  [ "$got" = "$want" ] || fail "kiln-run $* exited $got, expected $want; stderr: $(cat "$T/err")"
}
expect_out() { grep -qxF -- "$1" "$T/out" || fail "stdout lacks '$1': $(cat "$T/out")"; }
expect_err() { grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1': $(cat "$T/err")"; }
one_line_err() { [ "$(wc -l < "$T/err")" = 1 ] || fail "expected one stderr line, got: $(cat "$T/err")"; }

expect_rc 0 --nproc-per-node 2 --standalone /bin/sh -c 'echo "w=$WORLD_SIZE r=$RANK l=$LOCAL_RANK a=$MASTER_ADDR"'
expect_out "[rank 0] w=2 r=0 l=0 a=127.0.0.1"
expect_out "[rank 1] w=2 r=1 l=1 a=127.0.0.1"

# Several workers and no OMP_NUM_THREADS: kiln-run shares the cores out and says so once, as torchrun.
(unset OMP_NUM_THREADS; exec "$K" --nproc-per-node 2 /bin/sh -c 'echo "omp=$OMP_NUM_THREADS"') > "$T/out" 2> "$T/err" ||
  fail "kiln-run with 2 workers failed: $(cat "$T/err")"
[ "$(grep -c '^kiln-run: setting OMP_NUM_THREADS=[1-9][0-9]* for each of the 2 workers' "$T/err")" = 1 ] ||
  fail "kiln-run did not say once that it sets OMP_NUM_THREADS: $(cat "$T/err")"
grep -q '^\[rank 1\] omp=[1-9]' "$T/out" || fail "rank 1 got no OMP_NUM_THREADS: $(cat "$T/out")"
OMP_NUM_THREADS=3 "$K" --nproc-per-node 2 /bin/sh -c 'echo "omp=$OMP_NUM_THREADS"' > "$T/out" 2> "$T/err" ||
  fail "kiln-run with OMP_NUM_THREADS=3 failed"
[ ! -s "$T/err" ] || fail "kiln-run said something although OMP_NUM_THREADS was set: $(cat "$T/err")"
expect_out "[rank 1] omp=3"

expect_rc 0 --nproc_per_node=2 --nnodes 2 --node_rank 1 --master-addr 10.0.0.7 --master_port 23456 \
  /bin/sh -c 'echo "$RANK $WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT"'
expect_out "[rank 2] 2 4 1 10.0.0.7:23456"
expect_out "[rank 3] 3 4 1 10.0.0.7:23456"

# Flags after the program (and after `--`) belong to the program.
expect_rc 0 /bin/echo --nproc-per-node 7 --standalone
expect_out "[rank 0] --nproc-per-node 7 --standalone"
expect_rc 0 --nproc-per-node 1 -- /bin/echo -- --max-restarts 3
expect_out "[rank 0] -- --max-restarts 3"

# The other ranks are stopped at once, not left to finish their sleep.
t0=$(date +%s)
expect_rc 3 --nproc-per-node 3 /bin/sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30'
[ $(( $(date +%s) - t0 )) -lt 10 ] || fail "the ranks still running were not stopped promptly"
expect_err "rank 1 (local rank 1"
expect_rc 137 --nproc-per-node 2 /bin/sh -c 'if [ "$RANK" = 0 ]; then kill -9 $$; fi; sleep 30'
expect_rc 0 --max-restarts 2 /bin/sh -c 'test "$KILN_RESTART_COUNT" = 2'
expect_err "restart 2 of 2"

expect_rc 127 --nproc-per-node 2 /nonexistent/kiln-prog
expect_err "cannot run '/nonexistent/kiln-prog'"

# Bad input: one line on stderr, non-zero exit.
expect_rc 2
one_line_err; expect_err "no program"
expect_rc 1 --nproc-per-node 0 /bin/true
one_line_err; expect_err "nproc_per_node must be at least 1, got 0"
expect_rc 2 --nproc-per-node two /bin/true
one_line_err
expect_rc 2 --no-such-flag /bin/true
one_line_err; expect_err "--no-such-flag"

expect_rc 0 --help
for flag in --nproc-per-node --nnodes --node-rank --master-addr --master-port --standalone --max-restarts; do
  grep -qF -- "$flag" "$T/out" || fail "--help does not document $flag"
done

# SIGTERM to kiln-run reaches the workers, and kiln-run exits 128 + 15.
"$K" --nproc-per-node 2 /bin/sh -c 'trap "echo got-term; exit 0" TERM; touch "$0/ready.$RANK"; sleep 30 & wait' "$T" \
  > "$T/out" 2> "$T/err" &
pid=$!
i=0
while [ ! -e "$T/ready.0" ] || [ ! -e "$T/ready.1" ]; do
  i=$((i + 1)); [ $i -lt 500 ] || break
  sleep 0.02
done
kill -TERM $pid
wait $pid
got=$?
[ "$got" = 143 ] || fail "SIGTERM: kiln-run exited $got, expected 143"
expect_out "[rank 0] got-term"
expect_out "[rank 1] got-term"

checks_done kiln_run_cli
