"""The PyTorch twin of kiln::models::GPT: a nanoGPT-style GPT-2 with Hugging Face's parameter names
(weights (out, in) like nn.Linear), a tied lm_head, and a padded vocabulary whose columns beyond
vocab_size are sliced off before the cross entropy (as Kiln's GPT::loss does).

One definition for the parity oracle (tests/parity/gen_gpt.py, torch 1.13 on the CPU) and the
PyTorch side of apps/bench_gpt (apps/bench_gpt.py, also torch 2.x on CUDA). Modules are built in
the same order as before this file existed, so a seeded construction draws the same numbers.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

# "manual": q k^T / sqrt(d), causal mask, softmax, @ v (nanoGPT's slow path; the parity oracle's
# arithmetic). "sdpa": F.scaled_dot_product_attention(is_causal=True) (torch >= 2.0; flash or
# memory-efficient kernels on CUDA). "auto": sdpa where this torch has it, else manual.
ATTENTIONS = ("auto", "manual", "sdpa")


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    padded_vocab_size: int = 50304
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768


def has_sdpa():
    return hasattr(F, "scaled_dot_product_attention")


def resolve_attention(name):
    """"auto" -> "sdpa" or "manual"; fails on "sdpa" when this torch has no SDPA."""
    if name not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {name!r}")
    if name == "auto":
        return "sdpa" if has_sdpa() else "manual"
    if name == "sdpa" and not has_sdpa():
        raise ValueError(f"attention 'sdpa' needs torch >= 2.0 (F.scaled_dot_product_attention); this is {torch.__version__}")
    return name


class CausalSelfAttention(nn.Module):
    def __init__(self, config, attention):
        super().__init__()
        self.n_head = config.n_head
        self.attention = attention
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.n_head)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    """`half`: "attention" or "mlp" checkpoints that half while training (GPTRecompute)."""

    def __init__(self, config, attention, half=None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config, attention)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)
        self.half = half

    def forward(self, x):
        ckpt = self.training and torch.is_grad_enabled()
        attn_half = lambda h: self.attn(self.ln_1(h))  # noqa: E731
        mlp_half = lambda h: self.mlp(self.ln_2(h))  # noqa: E731
        run = lambda f, h, name: (torch.utils.checkpoint.checkpoint(f, h, use_reentrant=False)  # noqa: E731
                                  if ckpt and self.half == name else f(h))
        x = x + run(attn_half, x, "attention")
        return x + run(mlp_half, x, "mlp")


class GPT(nn.Module):
    """`recompute`: activation checkpointing while training (torch.utils.checkpoint,
    non-reentrant), as kiln::models::GPT::set_recompute: False/"none", True/"block" (per block),
    "attention" or "mlp" (that half of every block)."""

    def __init__(self, config, attention="auto", recompute=False):
        super().__init__()
        self.config = config
        self.attention = resolve_attention(attention)
        mode = {False: "none", True: "block"}.get(recompute, recompute)
        assert mode in ("none", "block", "attention", "mlp"), f"unknown recompute mode {recompute!r}"
        self.recompute = mode == "block"
        half = mode if mode in ("attention", "mlp") else None
        c = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.padded_vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            h=nn.ModuleList([Block(c, self.attention, half) for _ in range(c.n_layer)]),
            ln_f=nn.LayerNorm(c.n_embd)))
        self.lm_head = nn.Linear(c.n_embd, c.padded_vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx, targets=None):
        """idx (B, T) -> (logits (B, T, padded_vocab_size), mean cross entropy over the real
        vocabulary with targets of -1 ignored, or None without targets)."""
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
        checkpoint = self.recompute and self.training and torch.is_grad_enabled()
        for block in self.transformer.h:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpoint else block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        V = self.config.vocab_size
        loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1)
        return logits, loss
