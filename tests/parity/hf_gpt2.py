#!/usr/bin/env python3
"""GPT-2 logits from a Hugging Face GPT-2 safetensors file, with nothing but torch: the forward of
transformers' GPT2LMHeadModel written out against HF's own names and layouts (Conv1D weights
(in, out), y = x @ W + b; wte (vocab, C) tied as the lm_head; causal attention; tanh GELU;
layer norm eps 1e-5). test_parity_hf.cpp saves a trained Kiln GPT with save_gpt_hf and checks
that these logits equal its own: the file is what HF would load.

Usage: hf_gpt2.py MODEL.safetensors IDS.safetensors OUT.safetensors N_HEAD
  IDS holds "idx" (B, T) int64; OUT gets "logits" (B, T, vocab) float64.
Exits 77 when torch is missing (the test then reports itself skipped).
"""
import math
import sys

import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
import torch.nn.functional as F
import safetensors_io


def forward(w, idx, n_head):
    p = "transformer." if "transformer.wte.weight" in w else ""
    g = lambda name: w[p + name].double()  # noqa: E731
    B, T = idx.shape
    x = g("wte.weight")[idx] + g("wpe.weight")[:T]
    C = x.shape[-1]
    n_layer = 1 + max(int(k[len(p):].split(".")[1]) for k in w if k[len(p):].startswith("h."))
    ln = lambda x, name: F.layer_norm(x, (C,), g(name + ".weight"), g(name + ".bias"), 1e-5)  # noqa: E731
    conv1d = lambda x, name: x @ g(name + ".weight") + g(name + ".bias")  # noqa: E731 (HF Conv1D)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(n_layer):
        h = f"h.{i}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // n_head)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        m = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")
        x = x + conv1d(F.gelu(m, approximate="tanh"), h + "mlp.c_proj")
    x = ln(x, "ln_f")
    head = w["lm_head.weight"].double() if "lm_head.weight" in w else g("wte.weight")
    return x @ head.T


def main():
    model, ids, out, n_head = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    w = safetensors_io.load(model)
    idx = safetensors_io.load(ids)["idx"].long()
    with torch.no_grad():
        logits = forward(w, idx, n_head)
    safetensors_io.save(out, {"logits": logits.contiguous()})


if __name__ == "__main__":
    main()
