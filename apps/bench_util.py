"""Shared by the PyTorch halves of the bench_* apps: OpenBLAS tuning (import this module before
torch), the timing rule of apps/bench_util.h (median of at least min_iters runs and 0.5 s,
after 2 warm-ups), and the path to the PyTorch twins of Kiln's models (tests/parity/torch_*.py,
shared with the parity oracles)."""
import os
import sys
import time

# tests/parity of the source tree this file sits in: torch_gpt.py and torch_cifar_cnn.py.
REFERENCE_MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "parity")


def use_reference_models():
    """Makes `import torch_gpt` / `import torch_cifar_cnn` work (KILN_TORCH_MODELS_DIR overrides
    where they are looked for)."""
    path = os.path.normpath(os.environ.get("KILN_TORCH_MODELS_DIR", REFERENCE_MODELS_DIR))
    if not os.path.isfile(os.path.join(path, "torch_gpt.py")):
        raise FileNotFoundError(f"the PyTorch reference models are not in {path} (set KILN_TORCH_MODELS_DIR to the "
                                "folder holding torch_gpt.py, tests/parity of the Kiln sources)")
    if path not in sys.path:
        sys.path.append(path)


def tune_openblas():
    """If torch's BLAS is OpenBLAS, make sure it uses this CPU's kernels: on virtual machines it can
    misdetect the CPU (e.g. as Prescott, SSE3 only), which would make the reference look slow."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return
    if " avx512f" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif " avx2" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


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
