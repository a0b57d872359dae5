"""PyTorch parity oracle for nn layers: forward and backward with identical weights and inputs.

Usage: /usr/bin/python3 gen_layers.py OUT.safetensors
For each case "<case>": "<case>.param.<name>" (the layer's state_dict), "<case>.input",
"<case>.grad_out", and torch's "<case>.out", "<case>.grad_input", "<case>.grad.<name>".
tests/parity/test_parity_layers.cpp builds the same Kiln layer and compares.
"""
import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
import torch.nn as nn

torch.manual_seed(4321)
out = {}


def case(name, layer, x, train=True, integer_input=False):
    layer = layer.double()
    layer.train(train)
    for k, v in layer.state_dict().items():
        out[f"{name}.param.{k}"] = v.clone()
    if not integer_input:
        x = x.double().requires_grad_()
    y = layer(x)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    out[f"{name}.input"] = x.detach()
    out[f"{name}.grad_out"] = g
    out[f"{name}.out"] = y.detach()
    if not integer_input:
        out[f"{name}.grad_input"] = x.grad
    for k, p in layer.named_parameters():
        out[f"{name}.grad.{k}"] = p.grad
    # Buffers after the forward (BatchNorm running stats).
    for k, b in layer.named_buffers():
        out[f"{name}.buffer_after.{k}"] = b.clone()


case("linear", nn.Linear(7, 5), torch.randn(3, 4, 7))
case("linear_nobias", nn.Linear(7, 5, bias=False), torch.randn(6, 7))
case("embedding", nn.Embedding(11, 6), torch.randint(0, 11, (3, 5)), integer_input=True)
case("layer_norm", nn.LayerNorm(8), torch.randn(4, 3, 8))
case("gelu", nn.GELU(), torch.randn(5, 6))
case("gelu_tanh", nn.GELU(approximate="tanh"), torch.randn(5, 6))
case("relu", nn.ReLU(), torch.randn(5, 6))
case("conv2d", nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.randn(2, 3, 9, 9))
# 64 -> 64 channels, 3x3, stride 1: the shape Kiln's oneDNN path runs with Winograd kernels (the
# f32 case of test_parity_layers.cpp).
case("conv2d_wide", nn.Conv2d(64, 64, 3, padding=1), torch.randn(2, 64, 8, 8))
case("batch_norm2d", nn.BatchNorm2d(4), torch.randn(3, 4, 5, 5))
case("batch_norm2d_eval", nn.BatchNorm2d(4), torch.randn(3, 4, 5, 5), train=False)
case("max_pool2d", nn.MaxPool2d(2), torch.randn(2, 3, 6, 6))
case("adaptive_avg_pool2d", nn.AdaptiveAvgPool2d((2, 3)), torch.randn(2, 3, 7, 8))
case("flatten", nn.Flatten(), torch.randn(2, 3, 4))
case("dropout_eval", nn.Dropout(0.5), torch.randn(4, 5), train=False)

# Losses: input logits/predictions and targets.
logits = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
targets = torch.tensor([0, 4, -100, 2, 1, 3])
for name, loss_fn in [("cross_entropy", nn.CrossEntropyLoss()),
                      ("cross_entropy_smooth", nn.CrossEntropyLoss(label_smoothing=0.1)),
                      ("cross_entropy_sum", nn.CrossEntropyLoss(reduction="sum"))]:
    logits.grad = None
    loss = loss_fn(logits, targets)
    loss.backward()
    out[f"{name}.input"] = logits.detach().clone()
    out[f"{name}.target"] = targets
    out[f"{name}.out"] = loss.detach()
    out[f"{name}.grad_input"] = logits.grad.clone()
pred = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
tgt = torch.randn(4, 3, dtype=torch.float64)
loss = nn.MSELoss()(pred, tgt)
loss.backward()
out["mse.input"], out["mse.target"], out["mse.out"], out["mse.grad_input"] = pred.detach(), tgt, loss.detach(), pred.grad

parity_oracle.write(out)
