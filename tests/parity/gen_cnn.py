"""PyTorch parity oracle for models::CifarCnn: torch_cifar_cnn.CifarCnn, the same weights, batch and loss.

Usage: /usr/bin/python3 gen_cnn.py OUT.safetensors
Writes for each case "<case>" (max and avg global pool): "<case>.param.<name>" (state_dict
before the step), "<case>.input", "<case>.labels", and torch's "<case>.logits", "<case>.loss"
(cross entropy, label smoothing 0.2), "<case>.grad.<name>" and "<case>.buffer_after.<name>".
tests/parity/test_parity_cnn.cpp builds the Kiln model and compares.
"""
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("gen_cnn: SKIPPED: this python has no torch (install python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(__file__))
import safetensors_io  # noqa: E402
from torch_cifar_cnn import CifarCnn  # noqa: E402

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

safetensors_io.save(sys.argv[1], out, {"torch": torch.__version__})
print(f"gen_cnn: wrote {len(out)} tensors to {sys.argv[1]}")
