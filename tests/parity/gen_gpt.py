"""PyTorch parity oracle for Kiln's GPT: torch_gpt.GPT (a nanoGPT-style GPT-2 with Hugging Face's
parameter names, tied lm_head, padded vocabulary sliced off before the cross entropy), with its
manual attention path, against kiln::models::GPT.

Usage: /usr/bin/python3 gen_gpt.py OUT.safetensors
Writes "config" (i64: vocab, padded vocab, block, n_layer, n_head, n_embd), "param.<name>" (f64
state_dict without lm_head.weight), "idx", "targets" (one target is -1: ignored), and for
d in f64, f32 (the same weights cast): "<d>.logits", "<d>.loss", "<d>.grad.<name>".
tests/parity/test_parity_gpt.cpp loads the weights into kiln::models::GPT and compares.
"""
import math

import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
from torch_gpt import GPT, GPTConfig

VOCAB, PADDED, BLOCK, N_LAYER, N_HEAD, N_EMBD = 200, 256, 32, 2, 4, 64

torch.manual_seed(2024)
# The manual attention path: the oracle's arithmetic must not depend on the torch version.
model = GPT(GPTConfig(VOCAB, PADDED, BLOCK, N_LAYER, N_HEAD, N_EMBD), attention="manual").double()
with torch.no_grad():
    # Random, non-trivial values everywhere (LayerNorm weights away from 1, non-zero biases).
    for name, p in model.named_parameters():
        if ".ln_" in name or name.startswith("transformer.ln_f"):
            p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
        elif name.endswith("bias"):
            p.copy_(0.02 * torch.randn_like(p))
        else:
            std = 0.02 / math.sqrt(2 * N_LAYER) if name.endswith("c_proj.weight") else 0.02
            p.copy_(std * torch.randn_like(p))
    # A larger scale on wte so the softmax is far from uniform and gradients are not tiny.
    model.transformer.wte.weight.mul_(3.0)

B, T = 3, 24
idx = torch.randint(0, VOCAB, (B, T))
targets = torch.randint(0, VOCAB, (B, T))
targets[1, 5] = -1

out = {"config": torch.tensor([VOCAB, PADDED, BLOCK, N_LAYER, N_HEAD, N_EMBD]), "idx": idx, "targets": targets}
for k, v in model.state_dict().items():
    if k != "lm_head.weight":
        out[f"param.{k}"] = v.clone()
for dname, dtype in (("f64", torch.float64), ("f32", torch.float32)):
    m = model.to(dtype)
    m.zero_grad(set_to_none=True)
    logits, loss = m(idx, targets)
    loss.backward()
    out[f"{dname}.logits"] = logits.detach().clone()
    out[f"{dname}.loss"] = loss.detach().clone()
    for k, p in m.named_parameters():
        out[f"{dname}.grad.{k}"] = p.grad.clone()

parity_oracle.write(out)
