#!/usr/bin/env python3
"""Proves that a linked Kiln binary runs on any x86-64 CPU (Note [CPU capabilities] in
core/cpu_capability.h): every function that holds an instruction above the x86-64 baseline (AVX,
AVX2, FMA, BMI, SSE3-4.2, AVX-512, ...) must belong to a capability's own kernels -- named
kiln::cpu::cap_avx2:: / cap_avx512:: (the kernels, their lambdas and local helpers) or renamed
kiln_avx2. / kiln_avx512. (the inline and template functions of those objects,
cmake/kiln-cap-cc.sh) -- and hold nothing above that capability (no AVX-512 in an avx2 function).
A function of the baseline (cap_default, or anything else) with such an instruction, or an
AVX-512 instruction in an avx2 function, fails the check with its name and the instruction.

Usage: check-isa.py BINARY...   (exit 0: clean; 1: violations; 2: objdump missing or unreadable)
"""
import re
import shutil
import subprocess
import sys

# Register operands only AVX-512 has: zmm, the mask registers, and xmm/ymm 16-31.
AVX512_REG = re.compile(r"%(zmm\d+|k[0-7]\b|[xy]mm(1[6-9]|2\d|3[01])\b)|\{1to\d+\}")
# EVEX-only mnemonics that may run on xmm/ymm 0-15 (AVX-512VL) and so show no AVX-512 register.
AVX512_MNEMONIC = re.compile(
    r"^(vpternlog|vperm[ti]2|vcvt(t?p[sd]2u?qq|u?qq2p[sd]|t?p[sd]2udq|udq2p[sd]|ne2?ps2bf16|t?s[sd]2usi|usi2s[sd])|"
    r"vpmov((s|us)?(q[bwd]|d[bw]|wb)|[bwdq]2m|m2[bwdq])\b|vrndscale|vfixupimm|vgetexp|vgetmant|vscalef|vrcp14|vrsqrt14|"
    r"vp?compress|vp?expand|vpabsq|vp(max|min)[su]q|vpsraq|vpro[lr]|vpconflict|vplzcnt|vpmullq|"
    r"v(extract|insert)[fi](32x4|64x2|32x8|64x4)|vbroadcast[fi](32x2|32x4|64x2|32x8|64x4)|vshuf[fi](32x4|64x2)|"
    r"valign[dq]|vp?blendm|vmovdq[au](8|16|32|64)|vpbroadcastm|vreduce|vrange|vfpclass|vpmadd52|vdbpsadbw|"
    r"vps[rl]lvw|vpsravw|vpermw|vdpbf16ps|k[a-z]+)")
# Above the x86-64 baseline without VEX: SSE3, SSSE3, SSE4.1/4.2, POPCNT, LZCNT, BMI1/2, MOVBE.
# (tzcnt is not among them: GCC emits it for the baseline as `rep bsf`, which older CPUs run as bsf.)
ABOVE_BASELINE_MNEMONIC = re.compile(
    r"^(addsubp[sd]|haddp[sd]|hsubp[sd]|lddqu|mov[sd]ldup|movddup|pabs[bwd]|palignr|phaddw|phaddd|phaddsw|"
    r"phsub[wd]|phsubsw|pmaddubsw|pmulhrsw|pshufb|psign[bwd]|blendv?p[sd]|pblendvb|pblendw|dpp[sd]|extractps|"
    r"insertps|movntdqa|mpsadbw|packusdw|pcmpeqq|pcmpgtq|pextr[bdq]|pinsr[bdq]|phminposuw|pmax(sb|sd|ud|uw)|"
    r"pmin(sb|sd|ud|uw)|pmov[sz]x|pmuldq|pmulld|ptest|round[ps][sd]|pcmp[ei]str[im]|crc32|popcnt|lzcnt|"
    r"andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|movbe)\b")
SYMBOL = re.compile(r"^[0-9a-f]+ <(.*)>:$")
RANK = {"baseline": 0, "avx2": 1, "avx512": 2}


def level(mnemonic, operands):
    if AVX512_REG.search(operands) or AVX512_MNEMONIC.match(mnemonic):
        return "avx512"
    if (mnemonic.startswith("v") and mnemonic not in ("verr", "verw")) or "%ymm" in operands:
        return "avx2"
    if ABOVE_BASELINE_MNEMONIC.match(mnemonic):
        return "avx2"
    return "baseline"


def allowed(name):
    """The highest level the function may use, from its name."""
    if name.startswith("kiln_avx512.") or "kiln::cpu::cap_avx512::" in name:
        return "avx512"
    if name.startswith("kiln_avx2.") or "kiln::cpu::cap_avx2::" in name:
        return "avx2"
    return "baseline"


def check(binary):
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", binary], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"check-isa: objdump could not read {binary}: {out.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    bad = {}
    name = None
    seen = set()
    for line in out.stdout.splitlines():
        m = SYMBOL.match(line)
        if m:
            name = m.group(1)
            continue
        if name is None or "\t" not in line:
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        insn = parts[-1].strip().split(None, 1)
        if not insn:
            continue
        mnemonic = insn[0]
        operands = insn[1] if len(insn) > 1 else ""
        lv = level(mnemonic, operands)
        if lv == "baseline":
            continue
        cap = allowed(name)
        if cap != "baseline":
            seen.add((name, lv))
        if RANK[lv] > RANK[cap]:
            bad.setdefault(name, f"{lv}: {mnemonic} {operands}".strip())
    # A renamed function whose COMDAT group the linker discarded would be left undefined (weak: it
    # reads as address 0 and crashes when called); cmake/kiln-cap-cc.sh renames the groups too.
    syms = subprocess.run(["nm", binary], capture_output=True, text=True).stdout.splitlines()
    for line in syms:
        parts = line.split()
        if len(parts) >= 2 and parts[-2] in ("U", "w", "v") and parts[-1].startswith(("kiln_avx2.", "kiln_avx512.")):
            bad.setdefault(parts[-1], "renamed symbol left undefined")
    fns = {"avx2": set(), "avx512": set()}
    for n, lv in seen:
        fns[allowed(n)].add(n)
    print(f"check-isa: {binary}: {len(fns['avx2'])} avx2 and {len(fns['avx512'])} avx512 functions hold "
          f"instructions above the baseline, all in their capability's kernels; {len(bad)} violations")
    for n, what in sorted(bad.items())[:40]:
        print(f"  VIOLATION {n[:200]}: {what}")
    return not bad


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if shutil.which("objdump") is None:
        print("check-isa: objdump (binutils) is not installed", file=sys.stderr)
        sys.exit(2)
    ok = all([check(b) for b in sys.argv[1:]])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
