#!/bin/sh
# bench_gpt --estimate-memory --sharding (the memory planner, parallel/memory_plan.h) on the real
# executable: gpt-1.3b's bytes per parameter after a step at 8 ranks in every mode, today's policy
# (Kiln's rule: 16, 8 + 12/N, 4 + 16/N, 16/N) and a bf16 policy (ZeRO Table 1's rule: 16, 4 + 12/N,
# 2 + 14/N, 16/N), a row per term, and no device needed; --sharding alone still refuses cuda.
# Usage: bench_memory_plan.sh BUILD_APPS_DIR
BIN="$1"
. "$(dirname "$0")/../test_util.sh"
plan() {
  "$BIN/bench_gpt" --estimate-memory --sharding none,zero1,zero2,full --world 8 --config gpt-1.3b --device cuda "$@"
}
plan > "$T/out" 2>&1 || fail "bench_gpt --estimate-memory --sharding: $(cat "$T/out")"
grep -Eq '^  bytes/param +16.00 +9.50 +6.00 +2.00$' "$T/out" || fail "today's policy at 8 ranks: $(cat "$T/out")"
for term in parameters "gradients (shard)" "master weights" "optimizer states" "DDP buckets" activations \
            "reduce-scatter buffers" "FSDP gathered + prefetch" "ZeRO step all-gather" peak; do
  grep -q "^$term " "$T/out" || fail "no '$term' row: $(cat "$T/out")"
done
plan --param-dtype bf16 > "$T/out" 2>&1 || fail "--param-dtype bf16: $(cat "$T/out")"
grep -Eq '^  bytes/param +16.00 +5.50 +3.75 +2.00$' "$T/out" || fail "a bf16 policy at 8 ranks: $(cat "$T/out")"
grep -q "policy param_dtype bf16, reduce_dtype bf16" "$T/out" || fail "the policy is not printed: $(cat "$T/out")"
plan --param-dtype bf16 --reduce-dtype f32 > "$T/out" 2>&1 || fail "--reduce-dtype f32: $(cat "$T/out")"
grep -Eq '^  bytes/param +18.00 +7.50 +4.00 +2.25$' "$T/out" || fail "bf16 reduced in f32 at 8 ranks: $(cat "$T/out")"
"$BIN/bench_gpt" --sharding zero1 --device cuda > "$T/out" 2>&1 && fail "--sharding on cuda without --estimate-memory ran"
grep -q "estimate-memory" "$T/out" || fail "the refusal does not point to --estimate-memory: $(cat "$T/out")"
checks_done bench_memory_plan
