#!/usr/bin/env bash
# A small GPT (gpt-tiny with 1 layer of 64 dims) trained on the CPU for ~1 minute must bring both its
# final training and validation loss within 10% of the synthetic corpus's entropy floor, read by
# train_gpt from the floor.txt that kiln-make-shards writes. Short copy lags (2, 3) keep the tokens
# whose source lies before the window start rare (those cannot beat ln V), and noise 0.5 puts the
# floor at 3.47 nats/token. Usage: gpt_converge.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 1000000 --lags 2,3 --noise 0.5
"$bin/train_gpt" --train "$work/data/train_*.bin" --val "$work/data/val_*.bin" --n-layer 1 --n-embd 64 \
  --batch-size 8 --seq-len 128 --steps 800 --warmup-steps 10 --lr 1e-2 --min-lr 1e-3 --log-every 50 \
  --eval-every 400 --eval-tokens 32768 --threads 1 --metrics "$work/metrics.jsonl" --loss-svg "$work/loss.svg"
grep -q "<polyline" "$work/loss.svg"
python3 "$here/jsonl_losses.py" converge "$work/metrics.jsonl" 1.10
