"""PyTorch side of apps/bench_ops: the same CPU ops, sizes and timing rule as the C++ side.

Prints one JSON object {"name": value} (GFLOP/s for gemm, GB/s for the rest) on stdout, with
"torch", "threads" and blas_report's "blas", "blas_core", "blas_note" (apps/bench_util.py).
"""
import argparse
import json
import os

from bench_util import blas_report, median_seconds, prepare_openblas  # noqa: E402

prepare_openblas()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--gemm", type=str, default="512,1024,2048")
    ap.add_argument("--gemm-dtype", choices=["f32", "bf16"], default="f32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = blas_report(torch)
    g = torch.Generator().manual_seed(0)
    for n in [int(s) for s in args.gemm.split(",") if s]:
        dt = torch.bfloat16 if args.gemm_dtype == "bf16" else torch.float32
        a, b = torch.randn(n, n, generator=g).to(dt), torch.randn(n, n, generator=g).to(dt)
        out[f"gemm_{n}"] = 2 * n ** 3 / median_seconds(lambda: torch.matmul(a, b)) / 1e9
    n = args.elements
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    out["add"] = 12 * n / median_seconds(lambda: torch.add(x, y)) / 1e9
    out["mul_scalar"] = 8 * n / median_seconds(lambda: torch.mul(x, 1.5)) / 1e9
    out["exp"] = 8 * n / median_seconds(lambda: torch.exp(x)) / 1e9
    out["gelu_tanh"] = 8 * n / median_seconds(lambda: F.gelu(x, approximate="tanh")) / 1e9
    cols = min(n, 4096)
    s = x[: n // cols * cols].view(-1, cols)
    out["softmax"] = 8 * n / median_seconds(lambda: torch.softmax(s, dim=-1)) / 1e9
    out["torch"] = torch.__version__
    out["threads"] = torch.get_num_threads()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
