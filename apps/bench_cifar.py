"""PyTorch side of apps/bench_cifar: one CPU training step of the CIFAR CNN, timed like the C++ side.

The network is tests/parity/gen_cnn.py's (the twin of models::CifarCnn), f32, in training mode;
the step is zero_grad, forward, cross entropy with label smoothing 0.2, backward, SGD (Nesterov
momentum 0.9, weight decay 5e-4). Prints {"images_per_s": ..., "torch": ..., "threads": ...}.
"""
import argparse
import json

from bench_util import median_seconds, tune_openblas  # noqa: E402

tune_openblas()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

WIDTHS = {"tiny": [16, 32, 32], "standard": [64, 256, 256]}


class ConvGroup(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.norm1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(cout)
        self.act = nn.GELU()

    def forward(self, x):
        x = F.max_pool2d(self.conv1(x), 2)
        x = self.act(self.norm1(x))
        return self.act(self.norm2(self.conv2(x)))


class CifarCnn(nn.Module):
    def __init__(self, widths, num_classes=10, head_scale=1.0 / 9.0):
        super().__init__()
        self.groups = nn.ModuleList()
        cin = 3
        for w in widths:
            self.groups.append(ConvGroup(cin, w))
            cin = w
        self.head = nn.Linear(cin, num_classes, bias=False)
        self.head_scale = head_scale

    def forward(self, x):
        for g in self.groups:
            x = g(x)
        return self.head(x.amax(dim=(2, 3))) * self.head_scale


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
