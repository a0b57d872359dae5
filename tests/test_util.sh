# Shared by the POSIX-sh end-to-end tests (sourced: `. "$(dirname "$0")/../test_util.sh"`), as
# test_util.h is by the C++ ones: a scratch folder $T removed on exit; fail MESSAGE records a failed
# check and goes on, so one run reports every failure; checks_done NAME ends the script, exit 1
# when any check failed.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
checks_done() {
  [ "$fails" = 0 ] || { echo "$1: $fails check(s) failed"; exit 1; }
  echo "$1: all checks passed"
}
