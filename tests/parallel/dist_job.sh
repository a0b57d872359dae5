# Sourced by the kiln-run job tests (dist_kill.sh, dist_stall.sh) after setting `name`: a scratch
# directory removed on exit, run_job (runs a command with its output in $out and prints it, setting
# `status` and `elapsed` in seconds) and fail (prints why and exits 1).
dir=$(mktemp -d)
out="$dir/out.txt"
trap 'rm -rf "$dir"' EXIT
run_job() {
  start=$(date +%s)
  "$@" >"$out" 2>&1
  status=$?
  elapsed=$(( $(date +%s) - start ))
  cat "$out"
}
fail() { echo "$name: FAIL: $1"; exit 1; }
