#!/usr/bin/env bash
# What PowerSGD costs in final validation loss, Kiln and PyTorch side by side: gpt-tiny (1 layer,
# 64 dims, 4 heads) on 2 Gloo ranks on the synthetic corpus (copy the token 2 or 3 places back),
# trained by train_gpt and by torch DDP (scripts/torch_gpt_ddp.py: the same model, init law,
# AdamW, schedule, clipping and validation; torch's own powerSGD_hook), each with plain all-reduce
# and with PowerSGD at each STEPS:RANK:START of KILN_PSGD_CONFIGS. Prints, per configuration and
# seed, both frameworks' val loss and gap to their own all-reduce run.
# Usage: scripts/powersgd-gap.sh BUILD_DIR [WORK_DIR]
#   KILN_PSGD_CONFIGS (default "150:1:10 150:4:10 150:16:10 150:4:100 600:4:60 600:8:60 600:16:60")
#   KILN_PSGD_SEEDS   (default "1337")
# Needs PyTorch (/usr/bin/python3); a few minutes on 2 cores.
set -euo pipefail
build=$1 work=${2:-$1/powersgd-gap}
here=$(cd "$(dirname "$0")" && pwd)
configs=${KILN_PSGD_CONFIGS:-"150:1:10 150:4:10 150:16:10 150:4:100 600:4:60 600:8:60 600:16:60"}
seeds=${KILN_PSGD_SEEDS:-1337}
python=${KILN_TORCH_PYTHON:-/usr/bin/python3}
rm -rf "$work" && mkdir -p "$work"
"$build/apps/kiln-make-shards" --synthetic --tokens 400000 --lags 2,3 --noise 0.5 --out "$work/data" >/dev/null
shape=(--train "$work/data/train_*.bin" --val "$work/data/val_*.bin" --n-layer 1 --n-embd 64 --batch-size 8
       --seq-len 64 --warmup-steps 10 --lr 1e-2 --min-lr 1e-3 --eval-tokens 16384)

# kiln NAME STEPS SEED [FLAGS...] / torch NAME STEPS SEED [FLAGS...]: $work/NAME.val holds the final val loss.
kiln() {
  local name=$1 steps=$2 seed=$3
  "$build/apps/kiln-run" --nproc-per-node 2 --standalone "$build/apps/train_gpt" "${shape[@]}" --steps "$steps" \
    --seed "$seed" --log-every 100 --eval-every "$steps" --threads 1 --metrics "$work/$name.jsonl" "${@:4}" \
    >"$work/$name.log" 2>&1 || { tail -5 "$work/$name.log"; exit 1; }
  "$python" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print([r["val_loss"] for r in rows if "val_loss" in r][-1])' "$work/$name.jsonl" >"$work/$name.val"
}
torch() {
  local name=$1 steps=$2 seed=$3
  "$python" "$here/torch_gpt_ddp.py" "${shape[@]}" --steps "$steps" --seed "$seed" --log-every 100 \
    --out "$work/$name.json" "${@:4}" >"$work/$name.log" 2>&1 || { tail -5 "$work/$name.log"; exit 1; }
  "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["final_val"])' "$work/$name.json" >"$work/$name.val"
}

printf "%-6s %-10s %-6s %-6s %10s %9s %10s %9s\n" steps rank start seed kiln_val kiln_gap torch_val torch_gap
for seed in $seeds; do
  done_steps=" "
  for c in $configs; do
    IFS=: read -r steps rank start <<<"$c"
    if [[ $done_steps != *" $steps "* ]]; then
      kiln "kiln_none_${steps}_$seed" "$steps" "$seed" --comm-hook none
      torch "torch_none_${steps}_$seed" "$steps" "$seed" --hook none
      done_steps+="$steps "
      read -r kn <"$work/kiln_none_${steps}_$seed.val"; read -r tn <"$work/torch_none_${steps}_$seed.val"
      printf "%-6s %-10s %-6s %-6s %10.4f %9s %10.4f %9s\n" "$steps" all-reduce - "$seed" "$kn" "" "$tn" ""
    fi
    kiln "kiln_${c//:/_}_$seed" "$steps" "$seed" --comm-hook powersgd --powersgd-rank "$rank" --powersgd-start "$start"
    torch "torch_${c//:/_}_$seed" "$steps" "$seed" --hook powersgd --powersgd-rank "$rank" --powersgd-start "$start"
    read -r kn <"$work/kiln_none_${steps}_$seed.val"; read -r kp <"$work/kiln_${c//:/_}_$seed.val"
    read -r tn <"$work/torch_none_${steps}_$seed.val"; read -r tp <"$work/torch_${c//:/_}_$seed.val"
    awk -v s="$steps" -v r="$rank" -v st="$start" -v sd="$seed" -v kn="$kn" -v kp="$kp" -v tn="$tn" -v tp="$tp" \
      'BEGIN { printf "%-6s %-10s %-6s %-6s %10.4f %+9.4f %10.4f %+9.4f\n", s, r, st, sd, kp, kp - kn, tp, tp - tn }'
  done
done
