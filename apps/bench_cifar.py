"""PyTorch side of apps/bench_cifar: one CPU training step of the CIFAR CNN, timed like the C++ side.

The network is tests/parity/torch_cifar_cnn.py's CifarCnn (the twin of models::CifarCnn, shared
with the parity oracle gen_cnn.py), f32, in training mode; the step is zero_grad, forward, cross
entropy with label smoothing 0.2, backward, SGD (Nesterov momentum 0.9, weight decay 5e-4). Prints {"images_per_s": ..., "torch": ..., "threads": ...}.
"""
import argparse
import json

from bench_util import median_seconds, tune_openblas, use_reference_models  # noqa: E402

tune_openblas()
use_reference_models()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_cifar_cnn import CifarCnn  # noqa: E402

WIDTHS = {"tiny": [16, 32, 32], "standard": [64, 256, 256]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--model", choices=sorted(WIDTHS), default="tiny")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--min-iters", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = CifarCnn(WIDTHS[args.model]).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y, label_smoothing=0.2)
        loss.backward()
        opt.step()

    t = median_seconds(step, args.min_iters)
    print(json.dumps({"images_per_s": args.batch / t, "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
