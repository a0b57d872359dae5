"""PyTorch parity oracle for training: a 2-layer MLP and a small CNN trained 20 steps with
SGD(momentum, nesterov) and with AdamW(weight decay) + linear-warmup-cosine schedule + gradient
clipping, in f32 and f64.

Usage: /usr/bin/python3 gen_train.py OUT.safetensors
Keys: "<model>.<dtype>.init.<param>" (initial state_dict), "<model>.<dtype>.x" (steps, batch, ...),
"<model>.<dtype>.y" (steps, batch), and per optimizer "<model>.<opt>.<dtype>.losses" (steps,) and
"<model>.<opt>.<dtype>.final.<param>". tests/parity/test_parity_train.cpp replays it in Kiln.
"""
import math

import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS, BATCH = 20, 16
WARMUP, MIN_LR_FACTOR, CLIP = 5, 0.1, 1.0


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 4))


def cnn():
    # No conv bias before batch norm: its true gradient is 0, and AdamW would turn the rounding
    # noise left in it into full-size steps, so neither side's trajectory would mean anything.
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def warmup_cosine(step):
    """Multiplier of the base lr for the update at 0-based `step` (Kiln's warmup_cosine)."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, STEPS - WARMUP)
    return MIN_LR_FACTOR + 0.5 * (1 - MIN_LR_FACTOR) * (1 + math.cos(math.pi * progress))


out = {}
for model_name, make, x_shape, classes in [("mlp", mlp, (8,), 4), ("cnn", cnn, (3, 8, 8), 5)]:
    for dtype, dname in [(torch.float32, "f32"), (torch.float64, "f64")]:
        torch.manual_seed(7)
        init = make().to(dtype)
        xs = torch.randn(STEPS, BATCH, *x_shape, dtype=dtype)
        # Learnable labels: the arg-max of a fixed random linear map of the input (of the
        # per-channel means for the CNN), so the loss falls within 20 steps.
        feats = xs.reshape(STEPS, BATCH, -1) if len(x_shape) == 1 else xs.mean(dim=(-1, -2))
        teacher = torch.randn(feats.shape[-1], classes, dtype=dtype)
        ys = (feats @ teacher).argmax(-1)
        prefix = f"{model_name}.{dname}"
        for k, v in init.state_dict().items():
            out[f"{prefix}.init.{k}"] = v.clone()
        out[f"{prefix}.x"], out[f"{prefix}.y"] = xs, ys
        for opt_name in ["sgd", "adamw"]:
            model = make().to(dtype)
            model.load_state_dict(init.state_dict())
            model.train()
            if opt_name == "sgd":
                opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
                sched = None
            else:
                opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
                sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
            losses = []
            for s in range(STEPS):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(xs[s]), ys[s])
                loss.backward()
                if opt_name == "adamw":
                    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
                opt.step()
                if sched is not None:
                    sched.step()
                losses.append(loss.item())
            key = f"{model_name}.{opt_name}.{dname}"
            out[f"{key}.losses"] = torch.tensor(losses, dtype=torch.float64)
            for k, v in model.state_dict().items():
                out[f"{key}.final.{k}"] = v.clone()

parity_oracle.write(out, {"steps": str(STEPS)})
