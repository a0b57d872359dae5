"""PyTorch parity oracle for Kiln's GPT: a nanoGPT-style GPT-2 written here with Hugging Face's
parameter names (weights (out, in) like nn.Linear), tied lm_head, and a padded vocabulary whose
columns beyond vocab_size are sliced off before the cross entropy (as Kiln's GPT::loss does).

Usage: /usr/bin/python3 gen_gpt.py OUT.safetensors
Writes "config" (i64: vocab, padded vocab, block, n_layer, n_head, n_embd), "param.<name>" (f64
state_dict without lm_head.weight), "idx", "targets" (one target is -1: ignored), and for
d in f64, f32 (the same weights cast): "<d>.logits", "<d>.loss", "<d>.grad.<name>".
tests/parity/test_parity_gpt.cpp loads the weights into kiln::models::GPT and compares.
"""
import math
import os
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("gen_gpt: SKIPPED: this python has no torch (install python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(__file__))
import safetensors_io  # noqa: E402

VOCAB, PADDED, BLOCK, N_LAYER, N_HEAD, N_EMBD = 200, 256, 32, 2, 4, 64


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // N_HEAD)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(PADDED, N_EMBD), wpe=nn.Embedding(BLOCK, N_EMBD),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]), ln_f=nn.LayerNorm(N_EMBD)))
        self.lm_head = nn.Linear(N_EMBD, PADDED, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits[..., :VOCAB].reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1)
        return logits, loss


torch.manual_seed(2024)
model = GPT().double()
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

safetensors_io.save(sys.argv[1], out, {"torch": torch.__version__})
print(f"gen_gpt: wrote {len(out)} tensors to {sys.argv[1]}")
