"""PyTorch side of apps/bench_cuda: the same cases, shapes and timing rule (CUDA events, median of
at least 10 runs and 0.5 s after 3 warm-ups). Prints one JSON object {case: figure} on stdout,
figures in the C++ side's units (TFLOP/s or GB/s), plus "device" and "torch"."""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def median_ms(fn, min_iters=10, min_seconds=0.5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    start = time.perf_counter()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while len(times) < min_iters or time.perf_counter() - start < min_seconds:
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def gemm(n):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.matmul(a, b))
    return "gemm bf16 %d^3" % n, 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def attention(B, H, T, D, with_backward=True):
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)

    def step():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if with_backward:
            o.backward(g)

    ms = median_ms(step)
    name = "attention causal %s bf16" % ("fwd+bwd" if with_backward else "fwd")
    if (B, H, T, D) != (8, 16, 2048, 128):
        name += " B%d H%d T%d D%d" % (B, H, T, D)
    flops = (3.5 if with_backward else 1.0) * 4.0 * B * H * T * T * D / 2.0
    return name, flops / (ms * 1e-3) / 1e12


def layer_norm(rows, C):
    x = torch.randn(rows, C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.zeros(C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(rows, C, device="cuda", dtype=torch.bfloat16)

    def step():
        F.layer_norm(x, (C,), w, b).backward(g)

    ms = median_ms(step)
    return "layer_norm fwd+bwd bf16", 5.0 * rows * C * 2 / (ms * 1e-3) / 1e9


def cross_entropy(N, V):
    logits = torch.randn(N, V, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, V, (N,), device="cuda")

    def step():
        F.cross_entropy(logits, targets).backward()

    ms = median_ms(step)
    return "cross_entropy fwd+bwd bf16", 3.0 * N * V * 2 / (ms * 1e-3) / 1e9


def adamw(total):
    pieces = 4 * 48 + 2
    params = []
    for i in range(pieces):
        n = total // pieces + (1 if i < total % pieces else 0)
        p = torch.full((n,), 0.01, device="cuda", requires_grad=True)
        p.grad = torch.full((n,), 1e-3, device="cuda")
        params.append(p)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
    ms = median_ms(opt.step, min_iters=5)
    return "adamw step 1.3B f32", 28.0 * total / (ms * 1e-3) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--adamw-params", type=int, default=1300000000)
    args = ap.parse_args()
    want = lambda name: not args.only or args.only == name  # noqa: E731
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    cases = []
    if want("gemm"):
        cases += [lambda: gemm(4096), lambda: gemm(8192)]
    if want("attention"):
        cases += [lambda: attention(8, 16, 2048, 128), lambda: attention(8, 16, 2048, 128, False),
                  lambda: attention(16, 12, 1024, 64), lambda: attention(16, 12, 1024, 64, False)]
    if want("layer_norm"):
        cases.append(lambda: layer_norm(8 * 1024, 1600))
    if want("cross_entropy"):
        cases.append(lambda: cross_entropy(8 * 1024, 50257))
    if want("adamw"):
        cases.append(lambda: adamw(args.adamw_params))
    for case in cases:
        name, value = case()
        out[name] = value
        torch.cuda.empty_cache()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
