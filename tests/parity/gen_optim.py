"""PyTorch parity oracle for kiln/optim: torch.optim trajectories over a fixed gradient sequence.

Usage: /usr/bin/python3 gen_optim.py OUT.safetensors
Inputs (f64): "init.<k>" initial parameters, "grad.<s>.<k>" the gradient of parameter k at step s
(absent: the parameter has no gradient at that step and must be skipped). Outputs: "<opt>.<dtype>.
step<s>.<k>" torch's parameter k after step s, with parameters and gradients cast to <dtype>.
tests/parity/test_parity_optim.cpp replays the same steps in Kiln; both sides list the same cases.
"""
import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch

torch.manual_seed(4321)
STEPS = 10
SHAPES = [(5, 7), (11,), (3, 2, 4)]
out = {}

inits = [torch.randn(*s, dtype=torch.float64) for s in SHAPES]
grads = {}
for s in range(STEPS):
    for k, shape in enumerate(SHAPES):
        if k == 1 and s == 3:
            continue  # no gradient: torch skips the parameter (and its state) this step
        grads[(s, k)] = torch.randn(*shape, dtype=torch.float64) * (0.5 + 0.1 * s)
for k, t in enumerate(inits):
    out[f"init.{k}"] = t
for (s, k), g in grads.items():
    out[f"grad.{s}.{k}"] = g

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
}
for name, make in OPTIMIZERS.items():
    for dtype, dname in [(torch.float32, "f32"), (torch.float64, "f64")]:
        params = [t.clone().to(dtype).requires_grad_() for t in inits]
        opt = make(params)
        for s in range(STEPS):
            for k, p in enumerate(params):
                g = grads.get((s, k))
                p.grad = None if g is None else g.to(dtype)
            opt.step()
            for k, p in enumerate(params):
                out[f"{name}.{dname}.step{s}.{k}"] = p.detach().clone()

parity_oracle.write(out)
