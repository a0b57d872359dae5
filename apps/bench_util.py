"""Shared by the PyTorch halves of the bench_* apps: OpenBLAS tuning (import this module before
torch) and the timing rule of apps/bench_util.h (median of at least min_iters runs and 0.5 s,
after 2 warm-ups)."""
import os
import time


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
