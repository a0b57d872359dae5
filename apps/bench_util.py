"""Shared by the PyTorch halves of the bench_* apps: OpenBLAS's core (prepare_openblas before
importing torch, blas_report after), the timing rule of apps/bench_util.h (median of at least
min_iters runs and 0.5 s, after 2 warm-ups), and the path to the PyTorch twins of Kiln's models
(torch_gpt.py and torch_cifar_cnn.py, shared with the parity oracles in tests/parity)."""
import ctypes
import os
import sys
import time

# Where the PyTorch twins are: next to this file (the build copies them into its apps folder beside
# the scripts), else tests/parity of the source tree this file sits in.
_HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE_MODELS_DIRS = [_HERE, os.path.join(_HERE, os.pardir, "tests", "parity")]


def use_reference_models():
    """Makes `import torch_gpt` / `import torch_cifar_cnn` work (KILN_TORCH_MODELS_DIR overrides
    where they are looked for)."""
    dirs = [os.environ["KILN_TORCH_MODELS_DIR"]] if "KILN_TORCH_MODELS_DIR" in os.environ else REFERENCE_MODELS_DIRS
    dirs = [os.path.normpath(d) for d in dirs]
    path = next((d for d in dirs if os.path.isfile(os.path.join(d, "torch_gpt.py"))), None)
    if path is None:
        raise FileNotFoundError(f"the PyTorch reference models are in none of {', '.join(dirs)} (set "
                                "KILN_TORCH_MODELS_DIR to the folder holding torch_gpt.py, tests/parity of the Kiln "
                                "sources)")
    if path not in sys.path:
        sys.path.append(path)


# Note [OpenBLAS core]: Debian's OpenBLAS picks its kernels ("core") at load time from the CPU, or
# from OPENBLAS_CORETYPE. A machine that sets OPENBLAS_CORETYPE=Haswell (and OPENBLAS_L2_SIZE) on an
# AVX-512 CPU makes PyTorch's GEMM run AVX2 kernels (half speed on an AMD EPYC VM with full-width
# AVX-512; about the same on Zen 4, whose AVX-512 units are 256 bits wide), and some virtual CPUs are
# misdetected as old cores (Prescott, SSE3 only): either way GEMM-bound ratios could flatter Kiln. So the PyTorch sides run the best core this CPU supports: prepare_openblas (before torch is
# imported) unsets both variables when OPENBLAS_CORETYPE names an older core, and blas_report
# (after) reads the core OpenBLAS runs (openblas_get_corename) and, if OpenBLAS itself picked an
# older one, runs the script again once with OPENBLAS_CORETYPE set to the CPU's core. Cores are
# compared by the widest vector ISA their kernels use. ATEN_CPU_CAPABILITY=avx2 makes "this CPU" an
# AVX2 one (_cpu_isa): set OPENBLAS_CORETYPE=Haswell with it to time an AVX2-only CPU's OpenBLAS.
_ISA_NAMES = ["SSE", "AVX", "AVX2", "AVX-512"]
_CORE_ISA = {"sandybridge": 1, "bulldozer": 1, "piledriver": 1, "steamroller": 1,
             "haswell": 2, "zen": 2, "excavator": 2, "skylakex": 3, "cooperlake": 3, "sapphirerapids": 3}
_SSE_CORES = {"katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn", "dunnington",
              "nehalem", "athlon", "opteron", "opteron_sse3", "barcelona", "nano", "bobcat"}
_NOTE_VAR = "KILN_BENCH_OPENBLAS_NOTE"  # what prepare_openblas did, kept across the re-run
_RERUN_VAR = "KILN_BENCH_OPENBLAS_RERUN"


def _core_isa(name):
    """The ISA level (index into _ISA_NAMES) of an OpenBLAS core name, or None if not an x86 core."""
    n = name.strip().lower()
    return 0 if n in _SSE_CORES else _CORE_ISA.get(n)


def _cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_isa(flags):
    """The ISA level of this CPU, or of the CPU being emulated: ATEN_CPU_CAPABILITY=avx2 (how the
    benchmarks run PyTorch as on an AVX2-only CPU, e.g. an AMD EPYC before Zen 4) caps it at AVX2,
    so OPENBLAS_CORETYPE=Haswell is then kept, not replaced by this CPU's AVX-512 core."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        level = 3
    elif {"avx2", "fma"} <= flags:
        level = 2
    else:
        level = 1 if "avx" in flags else 0
    cap = {"default": 0, "avx2": 2}.get(os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower())
    return level if cap is None else min(level, cap)


def _best_core(flags):
    level = _cpu_isa(flags)
    if level == 3:
        return "Cooperlake" if "avx512_bf16" in flags else "SkylakeX"
    return {2: "Haswell", 1: "Sandybridge"}.get(level)


def prepare_openblas():
    """Before `import torch`: when OPENBLAS_CORETYPE names a core older than this CPU supports,
    unsets it and OPENBLAS_L2_SIZE (Note [OpenBLAS core]); blas_report says so."""
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if forced is None:
        return
    cpu, core = _cpu_isa(_cpu_flags()), _core_isa(forced)
    if core is None or core >= cpu:
        return
    l2 = os.environ.pop("OPENBLAS_L2_SIZE", None)
    os.environ.pop("OPENBLAS_CORETYPE")
    os.environ[_NOTE_VAR] = (f"OPENBLAS_CORETYPE={forced} ({_ISA_NAMES[core]}) is older than this CPU "
                             f"({_ISA_NAMES[cpu]}): unset for PyTorch"
                             + (f", with OPENBLAS_L2_SIZE={l2}" if l2 else ""))


def blas_library(torch):
    """The BLAS shared object torch's CPU matmul runs in, read from this process's memory map
    (Debian's torch falls back to the reference BLAS, ~50x slower, unless libopenblas0-pthread is
    installed; the C++ halves warn when it is not OpenBLAS)."""
    a = torch.randn(64, 64)
    a @ a
    try:
        for line in open("/proc/self/maps"):
            path = line.split()[-1]
            if "blas" in os.path.basename(path) and path.endswith(tuple(".so.%d" % i for i in range(10))):
                return os.path.realpath(path)
    except OSError:
        pass
    return "unknown"


def openblas_core(library):
    """openblas_get_corename() of the loaded `library`, or "-" when it is not OpenBLAS."""
    try:
        fn = ctypes.CDLL(library).openblas_get_corename
    except (OSError, AttributeError):
        return "-"
    fn.restype = ctypes.c_char_p
    return fn().decode()


def blas_report(torch):
    """After `import torch`, before timing anything: {"blas": the library, "blas_core": the OpenBLAS
    core it runs ("-": not OpenBLAS), "blas_note": what was changed for it, or ""}. Runs this
    script again (once) when OpenBLAS picked a core older than this CPU (Note [OpenBLAS core])."""
    library = blas_library(torch)
    core = openblas_core(library) if library != "unknown" else "-"
    flags = _cpu_flags()
    level, best = _core_isa(core), _best_core(flags)
    if level is not None and best is not None and level < _cpu_isa(flags) and _RERUN_VAR not in os.environ:
        os.environ[_RERUN_VAR] = "1"
        os.environ["OPENBLAS_CORETYPE"] = best
        note = os.environ.get(_NOTE_VAR, "")
        os.environ[_NOTE_VAR] = (note + "; " if note else "") + (
            f"OpenBLAS picked {core} ({_ISA_NAMES[level]}) on this {_ISA_NAMES[_cpu_isa(flags)]} CPU: "
            f"OPENBLAS_CORETYPE={best} set for PyTorch")
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable] + sys.argv)
    return {"blas": library, "blas_core": core, "blas_note": os.environ.get(_NOTE_VAR, "")}


def dtype_arg(s):
    """argparse type of --dtype: torch's spellings as Kiln's (fp32 -> f32, fp16 -> f16), as the C++ apps take them."""
    return {"fp32": "f32", "fp16": "f16"}.get(s, s)


def median_seconds(fn, min_iters=5, min_time=0.5):
    fn()
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]
