#!/bin/sh
# Compiler launcher for the avx2/avx512 kernel objects (Note [CPU capabilities] in
# core/cpu_capability.h): runs the compile (the rest of the command line, ccache included), then
# renames every weak and local function the object defines, and its weak vtables, to
# kiln_<cap>.<name>.
# Inline functions and template instances (Eigen's, the standard library's, Kiln's own helpers)
# are emitted in every object that uses them and merged by the linker, which keeps one copy for
# the whole program: without the rename it could keep the AVX-512 copy for baseline code. Local
# functions (statics, GCC's .constprop/.isra clones, OpenMP outlined bodies) cannot be merged, but
# the prefix lets scripts/check-isa.py tell whose instructions they are. Every COMDAT group's
# signature is renamed too (a constructor's group is named by a symbol of its own, e.g. ...C5Ev):
# a group whose signature the baseline objects share would be discarded by the linker, leaving its
# renamed functions undefined. Weak
# data other than vtables (static locals, guard variables) keeps its name: its state is shared.
# Usage: kiln-cap-cc.sh CAP NM OBJCOPY READELF compiler args...
set -e
cap=$1 nm=$2 objcopy=$3 readelf=$4
shift 4
"$@"
out=
prev=
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
case "$out" in *.o) ;; *) exit 0 ;; esac
syms="$out.kiln-rename"
{
  "$nm" --defined-only "$out" | awk '$2 == "W" || $2 == "t" || (($2 == "V" || $2 == "u") && $3 ~ /^_ZTV/) { print $3 }'
  "$readelf" -gW "$out" | sed -n "s/^COMDAT group section \[ *[0-9]*\] \`\.group' \[\(.*\)\] contains.*/\1/p"
} | sort -u | awk -v p="kiln_$cap." '{ print $1, p $1 }' > "$syms"
if [ -s "$syms" ]; then
  "$objcopy" --redefine-syms="$syms" "$out"
fi
rm -f "$syms"
