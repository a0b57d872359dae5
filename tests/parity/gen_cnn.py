"""PyTorch parity oracle for models::CifarCnn: torch_cifar_cnn.CifarCnn, the same weights, batch and loss.

Usage: /usr/bin/python3 gen_cnn.py OUT.safetensors
Writes for each case "<case>" (max and avg global pool): "<case>.param.<name>" (state_dict
before the step), "<case>.input", "<case>.labels", and torch's "<case>.logits", "<case>.loss"
(cross entropy, label smoothing 0.2), "<case>.grad.<name>" and "<case>.buffer_after.<name>".
tests/parity/test_parity_cnn.cpp builds the Kiln model and compares.
"""
import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
import torch.nn.functional as F
from torch_cifar_cnn import CifarCnn

torch.manual_seed(2024)
out = {}
for case, pool in [("max", "max"), ("avg", "avg")]:
    model = CifarCnn([8, 16, 16], pool).double().train()
    for k, v in model.state_dict().items():
        out[f"{case}.param.{k}"] = v.clone()
    x = torch.randn(6, 3, 32, 32, dtype=torch.float64)
    labels = torch.randint(0, 10, (6,))
    logits = model(x)
    loss = F.cross_entropy(logits, labels, label_smoothing=0.2)
    loss.backward()
    out[f"{case}.input"] = x
    out[f"{case}.labels"] = labels
    out[f"{case}.logits"] = logits.detach()
    out[f"{case}.loss"] = loss.detach()
    for k, p in model.named_parameters():
        out[f"{case}.grad.{k}"] = p.grad.clone()
    for k, b in model.named_buffers():
        out[f"{case}.buffer_after.{k}"] = b.clone()

parity_oracle.write(out)
