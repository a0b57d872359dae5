"""PyTorch side of apps/bench_gpt: one f32 CPU GPT training step (forward, loss, backward, AdamW,
zero_grad) of the model in tests/parity/gen_gpt.py, with the config, batch, threads and timing rule
the C++ side passes. Prints one JSON object {"step_s", "params", "torch", "threads"} on stdout.
"""
import argparse
import json
import math
import time

from bench_util import tune_openblas  # noqa: E402

tune_openblas()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class CausalSelfAttention(nn.Module):
    def __init__(self, c, n_head, block):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.register_buffer("mask", torch.ones(block, block, dtype=torch.bool).triu(1))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        # nanoGPT's slow path (torch 1.13 has no F.scaled_dot_product_attention).
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.n_head))
        att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, n_head, block):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, n_head, block)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.vocab = a.vocab
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(a.padded_vocab, a.n_embd), wpe=nn.Embedding(a.block, a.n_embd),
            h=nn.ModuleList([Block(a.n_embd, a.n_head, a.block) for _ in range(a.n_layer)]),
            ln_f=nn.LayerNorm(a.n_embd)))
        self.lm_head = nn.Linear(a.n_embd, a.padded_vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits[..., :self.vocab].reshape(-1, self.vocab), targets.reshape(-1),
                               ignore_index=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--padded-vocab", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq))
    targets = torch.randint(0, a.vocab, (a.batch, a.seq))

    def step():
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"step_s": times[len(times) // 2], "params": sum(p.numel() for p in model.parameters()),
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
