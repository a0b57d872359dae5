#!/bin/sh
# End-to-end checks of train_cifar, reading its JSONL metrics with awk (no other dependency).
# Usage: train_cifar_test.sh accuracy|ddp|sharding|syncbn|slurm|resume|preempt|errors path/to/train_cifar path/to/kiln-run
# Each mode is one CTest (tests/apps/train_cifar_tests.cmake says what each compares and why).
MODE="$1"
TC="$2"
KR="$3"
. "$(dirname "$0")/../test_util.sh"
# field FILE EPOCH KEY: the KEY value of the line with "epoch":EPOCH ("" when absent).
field() {
  awk -v e="\"epoch\":$2," -v k="\"$3\":" 'index($0, e) {
    s = substr($0, index($0, k) + length(k)); sub(/[,}].*/, "", s); print s }' "$1"
}
# close A B RTOL: |A - B| <= RTOL * max(|A|, |B|).
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d;
  m = (a < 0 ? -a : a); n = (b < 0 ? -b : b); if (n > m) m = n; exit !(a != "" && b != "" && d <= r * m) }'; }
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }
run() {  # run LOG ARGS...: fails the test with the log when the command exits non-zero
  log=$1; shift
  "$@" > "$log" 2>&1 || fail "exit $? from: $* -- $(tail -n 5 "$log")"
}
COMMON="--synthetic --model tiny --workers 1 --log-every 1000"

case "$MODE" in
accuracy)
  # Tiny model, 4000 synthetic images, 3 epochs of batch 64 (SGD Nesterov, lr 0.2, label smoothing 0.2).
  run "$T/log" "$TC" $COMMON --train-size 4000 --test-size 1000 --epochs 3 --batch-size 64 --threads 2 \
    --metrics "$T/m.jsonl" --acc-svg "$T/acc.svg"
  cat "$T/log"
  acc=$(field "$T/m.jsonl" 3 test_accuracy)
  at_least "$acc" 0.90 || fail "test accuracy after 3 epochs is '$acc', expected >= 0.90"
  [ "$(field "$T/m.jsonl" 3 test_total)" = 1000 ] || fail "epoch 3 did not evaluate 1000 test images"
  grep -q "NOTICE: training on SYNTHETIC" "$T/log" || fail "the synthetic-data notice was not printed"
  grep -q "<polyline" "$T/acc.svg" || fail "the accuracy SVG has no curve"
  ;;
ddp)
  # Same global batch 64 both ways: 2 Gloo ranks x 32, and 1 rank x 64 as 2 micro-batches of 32
  # (--grad-accum 2 takes the rank's images at even and odd positions, exactly the images the two
  # ranks get). BatchNorm normalizes each 32-image micro-batch alone in both runs, so the
  # per-step losses and gradients agree up to f32 summation order: the per-epoch train losses must
  # match to 1e-4 relative. Final test accuracy is compared within 3% (relative) only: the 1-rank run updates
  # the BatchNorm running statistics from both micro-batches, DDP keeps rank 0's.
  A="--train-size 2048 --test-size 500 --epochs 3 --batch-size 64 --threads 1"
  run "$T/one.log" "$TC" $COMMON $A --grad-accum 2 --metrics "$T/one.jsonl"
  run "$T/two.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --backend gloo --metrics "$T/two.jsonl"
  cat "$T/one.log" "$T/two.log"
  for e in 1 2 3; do
    a=$(field "$T/one.jsonl" $e train_loss); b=$(field "$T/two.jsonl" $e train_loss)
    close "$a" "$b" 1e-4 || fail "epoch $e train loss: 1 rank x 2 micro-batches $a, 2 ranks $b"
    [ "$(field "$T/one.jsonl" $e step)" = "$(field "$T/two.jsonl" $e step)" ] || fail "epoch $e step counts differ"
  done
  a=$(field "$T/one.jsonl" 3 test_accuracy); b=$(field "$T/two.jsonl" 3 test_accuracy)
  close "$a" "$b" 0.03 || fail "final test accuracy: 1 rank $a, 2 ranks $b (more than 3% apart)"
  [ "$(field "$T/two.jsonl" 3 test_total)" = 500 ] || fail "the 2-rank evaluation did not count 500 test images"
  ;;
sharding)
  # --sharding zero1|zero2|full on 2 Gloo ranks against DDP (none): the same SGD steps (the sharded
  # optimizer steps each rank's chunk; full gathers each conv group before its forward and
  # backward), and BatchNorm buffers, which are never sharded, are rank 0's broadcast before each
  # forward in every mode. Per-epoch train losses and the final accuracy agree to 1e-5; full is
  # also run with --sync-bn (its all-reduces inside a unit's forward, while the next unit's
  # all-gather is in flight) against DDP with --sync-bn.
  A="--train-size 1024 --test-size 256 --epochs 2 --batch-size 64 --threads 1 --backend gloo"
  for mode in none zero1 zero2 full; do
    run "$T/$mode.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --sharding $mode --metrics "$T/$mode.jsonl"
  done
  run "$T/none-sbn.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --sync-bn --metrics "$T/none-sbn.jsonl"
  run "$T/full-sbn.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --sync-bn --sharding full \
    --metrics "$T/full-sbn.jsonl"
  cat "$T/full.log"
  for pair in "none zero1" "none zero2" "none full" "none-sbn full-sbn"; do
    set -- $pair
    for e in 1 2; do
      a=$(field "$T/$1.jsonl" $e train_loss); b=$(field "$T/$2.jsonl" $e train_loss)
      close "$a" "$b" 1e-5 || fail "epoch $e train loss: $1 $a, $2 $b"
    done
    a=$(field "$T/$1.jsonl" 2 test_accuracy); b=$(field "$T/$2.jsonl" 2 test_accuracy)
    close "$a" "$b" 1e-5 || fail "final test accuracy: $1 $a, $2 $b"
  done
  ;;
syncbn)
  # --sync-bn: 2 Gloo ranks x 32 normalize with the statistics of all 64 images, as 1 rank with
  # batch 64 in one micro-batch does (same images per step, see ddp above), so the epoch-1 train
  # losses agree to f32 summation order (1e-4; measured 5e-5) and the running statistics, hence the
  # test accuracy, follow. Rounding differences grow with lr 0.2 over the steps, so epoch 2 gets 2e-3
  # (measured 8e-4). The control, 2 ranks without --sync-bn, normalizes 32 images at a time: its
  # epoch-1 loss is off by more than 1e-3 (measured 5e-3).
  A="--train-size 2048 --test-size 500 --batch-size 64 --threads 1"
  run "$T/one.log" "$TC" $COMMON $A --epochs 2 --metrics "$T/one.jsonl"
  run "$T/two.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --epochs 2 --backend gloo --sync-bn \
    --metrics "$T/two.jsonl"
  run "$T/local.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --epochs 1 --backend gloo \
    --metrics "$T/local.jsonl"
  cat "$T/one.log" "$T/two.log" "$T/local.log"
  grep -q "SyncBatchNorm" "$T/two.log" || fail "the 2-rank run did not report SyncBatchNorm"
  a=$(field "$T/one.jsonl" 1 train_loss); b=$(field "$T/two.jsonl" 1 train_loss); c=$(field "$T/local.jsonl" 1 train_loss)
  close "$a" "$b" 1e-4 || fail "epoch 1 train loss: 1 rank x 64 $a, 2 ranks x 32 with --sync-bn $b"
  close "$a" "$c" 1e-3 && fail "epoch 1 train loss without --sync-bn $c is as close to 1 rank x 64 ($a): the control failed"
  a=$(field "$T/one.jsonl" 2 train_loss); b=$(field "$T/two.jsonl" 2 train_loss)
  close "$a" "$b" 2e-3 || fail "epoch 2 train loss: 1 rank x 64 $a, 2 ranks x 32 with --sync-bn $b"
  a=$(field "$T/one.jsonl" 2 test_accuracy); b=$(field "$T/two.jsonl" 2 test_accuracy)
  close "$a" "$b" 0.02 || fail "final test accuracy: 1 rank $a, 2 ranks with --sync-bn $b"
  ;;
slurm)
  # Two tasks started as srun starts them (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; MASTER_ADDR
  # and MASTER_PORT exported), without kiln-run: dist::launched() makes them one 2-rank job. Before
  # it, train_cifar looked at WORLD_SIZE only: each task trained alone on the whole batch, both
  # wrote metrics, and they shared the checkpoint directory.
  PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  A="--train-size 1024 --test-size 200 --epochs 1 --batch-size 64 --threads 1 --backend gloo"
  for r in 0 1; do
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r MASTER_ADDR=127.0.0.1 \
      MASTER_PORT="$PORT" "$TC" $COMMON $A --metrics "$T/slurm$r.jsonl" --checkpoint-dir "$T/ckpt" > "$T/slurm$r.log" 2>&1 &
    eval "pid$r=\$!"
  done
  wait "$pid0" || fail "task 0 exited $?: $(tail -n 5 "$T/slurm0.log")"
  wait "$pid1" || fail "task 1 exited $?: $(tail -n 5 "$T/slurm1.log")"
  cat "$T/slurm0.log" "$T/slurm1.log"
  grep -q "2 rank(s) x batch 32" "$T/slurm0.log" || fail "the SLURM tasks did not train as one job of 2 ranks"
  [ "$(field "$T/slurm0.jsonl" 1 step)" = 16 ] || fail "epoch 1 is not 1024 / 64 = 16 steps of the global batch"
  [ ! -s "$T/slurm1.jsonl" ] || fail "task 1 wrote metrics: it trained alone"
  [ "$(ls "$T/ckpt")" = step_16.safetensors ] || fail "checkpoints: $(ls "$T/ckpt") (expected one job's step_16)"
  ;;
resume)
  # 3 epochs straight, versus 2 epochs (--stop-after-epoch 2, checkpoint) and a --resume for the
  # third. Kiln is deterministic (any thread count) and the checkpoint holds the weights, BatchNorm
  # buffers, momentum, LR-schedule step and generator state, while the data order and
  # augmentation are functions of (seed, epoch): epoch 3 must equal bit for bit.
  # 4 steps per epoch carry the momentum, schedule and generator over as well as 16 did (1024
  # images per epoch took 48 s under ASan, 256 take a quarter of that).
  A="--train-size 256 --test-size 100 --epochs 3 --batch-size 64 --threads 2"
  run "$T/full.log" "$TC" $COMMON $A --metrics "$T/full.jsonl"
  run "$T/part.log" "$TC" $COMMON $A --checkpoint-dir "$T/ckpt" --stop-after-epoch 2 --metrics "$T/resumed.jsonl"
  [ "$(wc -l < "$T/resumed.jsonl")" = 2 ] || fail "the run stopped after epoch 2 did not write exactly 2 epochs"
  run "$T/resume.log" "$TC" $COMMON $A --checkpoint-dir "$T/ckpt" --resume --metrics "$T/resumed.jsonl"
  cat "$T/full.log" "$T/part.log" "$T/resume.log"
  grep -q "resumed from .*step_8.safetensors: epoch 2" "$T/resume.log" || fail "the run did not resume from epoch 2"
  for k in step train_loss test_correct lr; do
    a=$(field "$T/full.jsonl" 3 $k); b=$(field "$T/resumed.jsonl" 3 $k)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "epoch 3 $k: uninterrupted '$a', resumed '$b'"
  done
  [ "$(wc -l < "$T/resumed.jsonl")" = 3 ] || fail "the resumed metrics file does not hold epochs 1-3 once each"
  ;;
preempt)
  # SIGTERM inside an epoch (Note [Preemption]): train_cifar finishes the step, checkpoints it with
  # its place in the epoch and exits 75; --resume goes on from the next step, and every epoch line
  # equals the uninterrupted run's bit for bit: no step lost or repeated, the epoch's mean loss whole.
  A="--train-size 1024 --test-size 100 --epochs 4 --batch-size 32 --threads 1"
  run "$T/full.log" "$TC" $COMMON $A --metrics "$T/full.jsonl"
  "$TC" $COMMON $A --checkpoint-dir "$T/ckpt" --metrics "$T/resumed.jsonl" > "$T/part.log" 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 600 ] && ! grep -q "^epoch 1/4" "$T/part.log"; do sleep 0.02; i=$((i + 1)); done
  kill -TERM $pid
  rc=0; wait $pid || rc=$?
  cat "$T/part.log"
  [ "$rc" = 75 ] || fail "exit status $rc after SIGTERM, expected 75"
  grep -q "stopped by a signal after step [0-9]* (epoch [2-4], step [0-9]* of 32), checkpoint .*ckpt/step_" \
    "$T/part.log" || fail "no stop message naming the step and the checkpoint"
  run "$T/resume.log" "$TC" $COMMON $A --checkpoint-dir "$T/ckpt" --resume --metrics "$T/resumed.jsonl"
  cat "$T/resume.log"
  grep -q "resumed from .*ckpt/step_" "$T/resume.log" || fail "the run did not resume"
  for e in 1 2 3 4; do
    for k in step train_loss test_correct lr; do
      a=$(field "$T/full.jsonl" $e $k); b=$(field "$T/resumed.jsonl" $e $k)
      [ -n "$a" ] && [ "$a" = "$b" ] || fail "epoch $e $k: uninterrupted '$a', preempted and resumed '$b'"
    done
  done
  [ "$(wc -l < "$T/resumed.jsonl")" = 4 ] || fail "the resumed metrics file does not hold epochs 1-4 once each"
  # 2 Gloo ranks under kiln-run, which forwards the SIGTERM: the ranks agree on the last step. The
  # interrupted epoch's loss is summed in another order (its first part averaged over the ranks at
  # the stop), so it agrees to 1e-12; the weights, and so everything else, bit for bit.
  run "$T/full2.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --metrics "$T/full2.jsonl"
  "$KR" --nproc-per-node 2 --standalone --stop-grace 30 "$TC" $COMMON $A --checkpoint-dir "$T/ckpt2" \
    --metrics "$T/resumed2.jsonl" > "$T/part2.log" 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 600 ] && ! grep -q "epoch 1/4" "$T/part2.log"; do sleep 0.02; i=$((i + 1)); done
  kill -TERM $pid
  wait $pid
  cat "$T/part2.log"
  grep -q "stopped by a signal after step" "$T/part2.log" || fail "2 ranks: no stop message"
  run "$T/resume2.log" "$KR" --nproc-per-node 2 --standalone "$TC" $COMMON $A --checkpoint-dir "$T/ckpt2" --resume \
    --metrics "$T/resumed2.jsonl"
  for e in 1 2 3 4; do
    for k in step test_correct lr; do
      a=$(field "$T/full2.jsonl" $e $k); b=$(field "$T/resumed2.jsonl" $e $k)
      [ -n "$a" ] && [ "$a" = "$b" ] || fail "2 ranks, epoch $e $k: uninterrupted '$a', preempted and resumed '$b'"
    done
    a=$(field "$T/full2.jsonl" $e train_loss); b=$(field "$T/resumed2.jsonl" $e train_loss)
    close "$a" "$b" 1e-12 || fail "2 ranks, epoch $e train loss: uninterrupted $a, preempted and resumed $b"
  done
  ;;
errors)
  # Bad input: one clear stderr line and a non-zero exit.
  for args in "--grad-accum 3 --batch-size 64" "--data $T/missing --batch-size 64" "--model huge"; do
    "$TC" $args > "$T/out" 2> "$T/err" && fail "train_cifar $args exited 0"
    [ "$(wc -l < "$T/err")" = 1 ] || fail "train_cifar $args: expected one stderr line, got: $(cat "$T/err")"
  done
  "$KR" --nproc-per-node 2 --standalone "$TC" --batch-size 63 > "$T/out" 2>&1 && fail "batch 63 on 2 ranks exited 0"
  grep -q "not divisible by the world size 2" "$T/out" || fail "no divisibility error: $(cat "$T/out")"
  "$TC" --help | grep -q -- "--label-smoothing" || fail "--help does not document --label-smoothing"
  ;;
*)
  echo "unknown mode $MODE"; exit 2 ;;
esac
checks_done "train_cifar $MODE"
