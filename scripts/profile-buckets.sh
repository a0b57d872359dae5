#!/usr/bin/env bash
# DDP bucket sizes against the overlap of all-reduce with backward (issue #22, seed 002 §5): trains
# the gpt-10m shape (6 layers, 6 heads, 384 dims; T 128, gpt-tiny's context, B 8 per rank) with 2 ranks under kiln-run for each bucket_cap_mb,
# profiles steps A:B with --profile, and prints per cap the mean step time and the fraction of the
# bucket all-reduce time that backward compute overlapped (Note [Overlapped fraction]), per rank.
# Usage: scripts/profile-buckets.sh [BIN_DIR] [WORK_DIR]   (env: CAPS, DEVICE=cpu|cuda, STEPS, PROFILE_STEPS, B, T)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-$root/build/apps}
work=${2:-$root/profile-buckets}
caps=${CAPS:-"1 5 25 100"}
device=${DEVICE:-cpu}
steps=${STEPS:-8}
profile_steps=${PROFILE_STEPS:-3:7}
mkdir -p "$work"
[ -e "$work/data/train_000000.bin" ] || [ -n "$(ls "$work"/data/train_*.bin 2>/dev/null)" ] ||
  "$bin/kiln-make-shards" --synthetic --tokens 400000 --out "$work/data" >/dev/null
model=(--model gpt-tiny --n-layer 6 --n-head 6 --n-embd 384)
[ "$device" = cuda ] && model=(--model "${MODEL:-gpt2-124m}")
threads=()
[ "$device" = cpu ] && threads=(--threads 1)  # 2 ranks on the 2 cores
for cap in $caps; do
  "$bin/kiln-run" --nproc-per-node 2 --standalone "$bin/train_gpt" --train "$work/data/train_*.bin" "${model[@]}" \
    --device "$device" --batch-size "${B:-8}" --seq-len "${T:-128}" --steps "$steps" --warmup-steps 1 \
    --log-every 100 "${threads[@]}" --bucket-cap-mb "$cap" --profile "$work/cap$cap.json" \
    --profile-steps "$profile_steps" >"$work/cap$cap.log" 2>&1 || { cat "$work/cap$cap.log"; exit 1; }
done
python3 - "$work" $caps <<'PY'
import json, sys
work, caps = sys.argv[1], sys.argv[2:]
print(f"{'bucket_cap_mb':>13} {'rank':>4} {'buckets':>7} {'step ms':>9} {'all-reduce ms':>13} {'overlapped ms':>13} {'overlapped':>10}")
for cap in caps:
    ranks = json.load(open(f"{work}/cap{cap}.json"))["otherData"]["ranks"]
    for r in ranks:
        s = r["kiln_summary"]
        per_step = s["bucket_allreduces"] / max(1, s["steps"])
        frac = s["overlapped_fraction"]
        print(f"{cap:>13} {r['rank']:>4} {per_step:>7.0f} {s['mean_step_ms']:>9.1f} {s['allreduce_ms']/s['steps']:>13.1f} "
              f"{s['overlapped_ms']/s['steps']:>13.1f} {'-' if frac is None else f'{100*frac:.1f}%':>10}")
print("(per profiled step; overlapped: |U(all-reduce) ∩ U(backward compute)| / |U(all-reduce)|)")
PY
