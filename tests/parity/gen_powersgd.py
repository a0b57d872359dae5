"""PyTorch parity oracle for Kiln's PowerSGD comm hook: torch's own powerSGD_hook (torch 1.13,
torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook) run on one Gloo rank over a bucket of
small gradients, for several ranks r, with error feedback and warm start.

Usage: /usr/bin/python3 gen_powersgd.py OUT.safetensors
Entries (f64): "shape.<k>" (the k-th gradient's shape, as a vector), "q0.r<r>" the Q that warm
start begins with (written into torch's q_memory_dict before the first compressed iteration, as
Kiln's PowerSGDState::set_q does), "grad.<it>" the bucket before iteration <it>, and per rank r
"out.r<r>.<it>" the bucket after the hook and "error.r<r>.<it>" the error feedback it kept.
tests/parity/test_parity_powersgd.cpp replays the same iterations in Kiln.
"""
import os
import sys
import tempfile

import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

# A (20, 16), b (16), C (6, 2, 8) viewed (6, 16), D (7, 5): with min_compression_rate 1, A is
# compressed at every rank below, C at r <= 3, D at r <= 2, b never (a vector).
SHAPES = [(20, 16), (16,), (6, 2, 8), (7, 5)]
RANKS = [1, 2, 3, 16]  # 1, 2: Gram-Schmidt; 3, 16: QR (16 is full rank for A and C)
START, ITERS = 2, 7

torch.manual_seed(2024)
numels = [int(torch.tensor(s).prod()) for s in SHAPES]
total = sum(numels)
grads = []
for it in range(ITERS):
    g = torch.randn(total, dtype=torch.float64) * (1 + 0.2 * it)
    if it == 4:  # A rank 1 and C rank 2 this time: rank-deficient input to the orthogonalization
        g[:320] = torch.outer(torch.randn(20, dtype=torch.float64), torch.randn(16, dtype=torch.float64)).reshape(-1)
        c = torch.randn(6, 2, dtype=torch.float64) @ torch.randn(2, 16, dtype=torch.float64)
        g[336:432] = c.reshape(-1)
    grads.append(g)


class Bucket:  # what powerSGD_hook reads of dist.GradBucket
    def __init__(self, buffer):
        self._buffer = buffer

    def buffer(self):
        return self._buffer

    def index(self):
        return 0

    def is_last(self):
        return True

    def gradients(self):
        out, at = [], 0
        for shape, n in zip(SHAPES, numels):
            out.append(self._buffer[at:at + n].view(shape))
            at += n
        return out


def pq_sizes(r):
    ps, qs = 0, 0
    for shape in SHAPES:
        if len(shape) < 2:
            continue
        n = shape[0]
        m = int(torch.tensor(shape[1:]).prod())
        rr = min(n, m, r)
        if rr * (n + m) * 1.0 < n * m:
            ps += n * rr
            qs += m * rr
    return ps, qs


def main():
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        out = {f"shape.{k}": torch.tensor(s, dtype=torch.float64) for k, s in enumerate(SHAPES)}
        for it, g in enumerate(grads):
            out[f"grad.{it}"] = g
        for r in RANKS:
            state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=r,
                                       start_powerSGD_iter=START, min_compression_rate=1,
                                       use_error_feedback=True, warm_start=True)
            p_size, q_size = pq_sizes(r)
            q0 = torch.randn(q_size, dtype=torch.float64)
            out[f"q0.r{r}"] = q0.clone()
            for it in range(ITERS):
                if it == START:  # warm start from q0 (torch then orthogonalizes it)
                    state.q_memory_dict[0] = q0.clone()
                    state.p_memory_dict[0] = torch.empty(p_size, dtype=torch.float64)
                buf = grads[it].clone()
                result = psgd.powerSGD_hook(state, Bucket(buf)).wait()
                out[f"out.r{r}.{it}"] = result.clone()
                if it >= START:
                    out[f"error.r{r}.{it}"] = state.error_dict[0].clone()
        parity_oracle.write(out)
    # torch 1.13's Gloo group can abort while it is torn down ("terminate ... Resource deadlock
    # avoided": the hook's futures drop its last reference on its own worker thread, which then
    # joins itself; about 1 run in 20 with both cores busy). The file is written: leave without
    # destroying the group.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
