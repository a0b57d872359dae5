"""PyTorch side of apps/bench_ops: the same CPU ops, sizes and timing rule as the C++ side.

Prints one JSON object {"name": value} (GFLOP/s for gemm, GB/s for the rest) on stdout.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def timeit(fn, min_time=0.5, min_iters=5):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--gemm", type=str, default="512,1024,2048")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = {}
    g = torch.Generator().manual_seed(0)
    for n in [int(s) for s in args.gemm.split(",") if s]:
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        out[f"gemm_{n}"] = 2 * n ** 3 / timeit(lambda: torch.matmul(a, b)) / 1e9
    n = args.elements
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    out["add"] = 12 * n / timeit(lambda: torch.add(x, y)) / 1e9
    out["mul_scalar"] = 8 * n / timeit(lambda: torch.mul(x, 1.5)) / 1e9
    out["exp"] = 8 * n / timeit(lambda: torch.exp(x)) / 1e9
    out["gelu_tanh"] = 8 * n / timeit(lambda: F.gelu(x, approximate="tanh")) / 1e9
    rows = n // 4096
    s = x.view(rows, 4096)
    out["softmax"] = 8 * n / timeit(lambda: torch.softmax(s, dim=-1)) / 1e9
    out["torch"] = torch.__version__
    out["threads"] = torch.get_num_threads()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
