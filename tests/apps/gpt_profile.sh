#!/usr/bin/env bash
# train_gpt --profile under kiln-run with 2 ranks: each rank writes its trace, rank 0 merges them
# into one file with a process per rank, every rank's bucket all-reduces appear as slices in the
# order they were launched, and rank 0 prints the summary table.
# Usage: gpt_profile.sh BIN_DIR WORK_DIR
source "$(dirname "$0")/gpt_app_env.sh"
make_shards 100000
two_ranks --train "$work/data/train_*.bin" --n-layer 2 \
  --n-embd 128 --batch-size 4 --seq-len 32 --steps 5 --warmup-steps 1 --threads 1 --bucket-cap-mb 0.05 \
  --profile "$work/prof/trace.json" --profile-steps 1:4 >"$work/out.txt"
grep -q "all-reduce time overlapped by backward compute" "$work/out.txt"
grep -q "merged 2 ranks into $work/prof/trace.json" "$work/out.txt"
python3 - "$work/prof" <<'PY'
import json, sys
d = sys.argv[1]
merged = json.load(open(f"{d}/trace.json"))
ev = merged["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert names == {0: "rank 0", 1: "rank 1"}, names
for rank in (0, 1):
    own = json.load(open(f"{d}/trace.rank{rank}.json"))["traceEvents"]
    launches = [e for e in own if e["ph"] == "X" and e["name"] == "allreduce launch"]
    slices = [e["args"]["bucket"] for e in ev if e["pid"] == rank and e["ph"] == "b"]
    steps = [e["args"]["step"] for e in own if e["ph"] == "X" and e["name"] == "step"]
    assert steps == [1, 2, 3], steps
    assert len(launches) >= 6, len(launches)  # several buckets per step (first bucket 1 MiB, then 0.05)
    assert slices == [e["args"]["bucket"] for e in launches], (slices, launches)
    n = len(launches) // 3
    assert slices == list(range(n)) * 3, slices
summaries = merged["otherData"]["ranks"]
assert [s["rank"] for s in summaries] == [0, 1]
for s in summaries:
    k = s["kiln_summary"]
    assert k["steps"] == 3 and k["bucket_allreduces"] == len(slices) and 0 <= k["overlapped_fraction"] <= 1, k
PY
