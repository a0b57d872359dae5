"""The PyTorch twin of kiln::models::CifarCnn (airbench-style conv groups, global pool, scaled
linear head). One definition for the parity oracle (tests/parity/gen_cnn.py) and the PyTorch side
of apps/bench_cifar (apps/bench_cifar.py).
"""
import torch.nn as nn
import torch.nn.functional as F


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
    """`widths`: channels of each conv group; `pool`: "max" or "avg" global pooling."""

    def __init__(self, widths, pool="max", num_classes=10, head_scale=1.0 / 9.0):
        super().__init__()
        if pool not in ("max", "avg"):
            raise ValueError(f"pool must be 'max' or 'avg', got {pool!r}")
        self.groups = nn.ModuleList()
        cin = 3
        for w in widths:
            self.groups.append(ConvGroup(cin, w))
            cin = w
        self.head = nn.Linear(cin, num_classes, bias=False)
        self.pool, self.head_scale = pool, head_scale

    def forward(self, x):
        for g in self.groups:
            x = g(x)
        x = x.amax(dim=(2, 3)) if self.pool == "max" else x.mean(dim=(2, 3))
        return self.head(x) * self.head_scale
