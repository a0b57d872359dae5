"""PyTorch's side of scripts/powersgd-gap.sh: train_gpt's CPU run (same model, init law, AdamW,
warmup + cosine schedule, clipping, token windows and validation) under torch DDP on Gloo, with
plain all-reduce or torch's own powerSGD_hook, so the gap PowerSGD costs can be measured for
torch and for Kiln on the same corpus and configuration.

Differences from train_gpt, none of which the gap depends on: the init numbers (same law, torch's
generator) and the order of the shuffled training windows (numpy's permutation per epoch).

With --world 1 it runs in this process without a process group or DDP, on --device cpu or cuda
(--dtype bf16: torch.autocast, as train_gpt --dtype bf16): the PyTorch twin of scripts/train-parity.sh.

Usage: python3 scripts/torch_gpt_ddp.py --train 'data/train_*.bin' --val 'data/val_*.bin'
       [--hook none|powersgd --powersgd-rank R --powersgd-start S] [--world 2] [--steps 150]
       [--device cpu|cuda] [--dtype fp32|bf16] [--eval-every N] ...
Prints one line: {"hook": ..., "final_val": ..., "losses": {step: train loss}, "val": {step: val loss}}.
"""
import argparse
import glob
import json
import math
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "parity"))
from torch_gpt import GPT, GPTConfig  # noqa: E402

MAGIC, VERSION = 20240520, 1


def read_shards(pattern):
    """The llm.c shards matching `pattern` (sorted), each as a uint16 array; fails naming the file."""
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise SystemExit(f"torch_gpt_ddp: no shard matches {pattern!r}")
    shards = []
    for path in paths:
        header = np.fromfile(path, dtype="<i4", count=256)
        if len(header) < 3 or header[0] != MAGIC or header[1] != VERSION:
            raise SystemExit(f"torch_gpt_ddp: {path} is not an llm.c token shard (magic {MAGIC}, version {VERSION})")
        tokens = np.fromfile(path, dtype="<u2", offset=1024)
        if len(tokens) != header[2]:
            raise SystemExit(f"torch_gpt_ddp: {path} holds {len(tokens)} tokens, its header says {header[2]}")
        shards.append(tokens)
    return shards


def windows(shards, T):
    """Every window of T+1 tokens with stride T, shard by shard (as kiln::data::TokenLoader)."""
    return [(s, i * T) for s in range(len(shards)) for i in range((len(shards[s]) - 1) // T)]


def batch(shards, wins, positions, T):
    rows = np.stack([shards[wins[p][0]][wins[p][1]:wins[p][1] + T + 1] for p in positions]).astype(np.int64)
    t = torch.from_numpy(rows)
    return t[:, :-1], t[:, 1:]


def lr_factor(step, warmup, total, min_factor):
    """optim::warmup_cosine_factor."""
    if step < warmup:
        return (step + 1) / warmup
    ratio = (step - warmup) / (total - warmup)
    return min_factor + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (1.0 - min_factor)


def init_gpt2(model, n_layer, generator):
    """GPT-2's init (kiln::models::GPT): weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L))."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif ".ln_" in name or name.startswith("transformer.ln_f"):
                p.fill_(1.0)
            else:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                p.copy_(torch.randn(p.shape, generator=generator) * std)


def all_reduce(t, world):
    if world > 1:
        dist.all_reduce(t)
    return t


def evaluate(model, val, val_w, a, rank, per_step, device, autocast):
    """train_gpt's validation: the first eval_tokens of the val windows, in order, split over ranks."""
    model.eval()
    batches = max(1, a.eval_tokens // (per_step * a.seq_len))
    total = torch.zeros((), device=device)
    with torch.no_grad():
        for b in range(batches):
            first = b * per_step + rank * a.batch_size
            x, y = batch(val, val_w, range(first, first + a.batch_size), a.seq_len)
            with autocast():
                total += model(x.to(device), y.to(device))[1].float()
    model.train()
    return all_reduce(total, a.world).item() / (batches * a.world)


def worker(rank, a, port, out):
    torch.set_num_threads(a.threads)
    if a.world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=a.world)
    device = torch.device(a.device)
    bf16 = a.dtype == "bf16"

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    g = torch.Generator().manual_seed(a.seed)
    config = GPTConfig(vocab_size=a.vocab, padded_vocab_size=a.vocab, block_size=a.block, n_layer=a.n_layer,
                       n_head=a.n_head, n_embd=a.n_embd)
    model = GPT(config, attention="manual" if device.type == "cpu" else "auto")
    init_gpt2(model, a.n_layer, g)
    model.to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    ddp = DDP(model) if a.world > 1 else model
    if a.hook == "powersgd" and a.world > 1:
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                       start_powerSGD_iter=a.powersgd_start, min_compression_rate=2,
                                       use_error_feedback=True, warm_start=True, random_seed=a.seed)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    elif a.hook != "none":
        raise SystemExit(f"torch_gpt_ddp: --hook must be none or powersgd, got {a.hook!r}")

    train, val = read_shards(a.train), read_shards(a.val)
    train_w, val_w = windows(train, a.seq_len), windows(val, a.seq_len)
    per_step = a.world * a.batch_size
    rng = np.random.default_rng(a.seed)
    order, position, losses, vals = rng.permutation(len(train_w)), 0, {}, {}
    for step in range(a.steps):
        if position + per_step > len(order):
            order, position = rng.permutation(len(train_w)), 0
        x, y = batch(train, train_w, order[position + rank * a.batch_size:position + (rank + 1) * a.batch_size], a.seq_len)
        position += per_step
        for group in opt.param_groups:
            group["lr"] = a.lr * lr_factor(step, a.warmup_steps, a.steps, a.min_lr / a.lr)
        with autocast():
            _, loss = ddp(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        if (step + 1) % a.log_every == 0 or step == 0 or step + 1 == a.steps:
            losses[step + 1] = all_reduce(loss.detach().float().clone(), a.world).item() / a.world
        if a.eval_every > 0 and (step + 1) % a.eval_every == 0 and step + 1 != a.steps:
            vals[step + 1] = evaluate(model, val, val_w, a, rank, per_step, device, autocast)

    final = evaluate(model, val, val_w, a, rank, per_step, device, autocast)
    vals[a.steps] = final
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"hook": a.hook, "final_val": final, "losses": losses, "val": vals}, f)
    if a.world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", required=True)
    p.add_argument("--val", required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--hook", default="none")
    p.add_argument("--powersgd-rank", type=int, default=1)
    p.add_argument("--powersgd-start", type=int, default=10)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=1)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--min-lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-tokens", type=int, default=16384)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: --world 1 only")
    p.add_argument("--dtype", choices=["fp32", "f32", "bf16"], default="fp32")
    p.add_argument("--eval-every", type=int, default=0, help="also the val loss every N steps (train_gpt's)")
    p.add_argument("--out", required=True, help="JSON file for the result")
    a = p.parse_args()
    if a.device == "cuda" and a.world != 1:
        raise SystemExit("torch_gpt_ddp: --device cuda runs one process (--world 1)")
    if a.world == 1:
        worker(0, a, 0, a.out)
        print(open(a.out).read())
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port, a.out), nprocs=a.world, join=True)
    print(open(a.out).read())


if __name__ == "__main__":
    main()
