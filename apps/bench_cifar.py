"""PyTorch side of apps/bench_cifar: one training step of the CIFAR CNN, timed like the C++ side.

The network is tests/parity/torch_cifar_cnn.py's CifarCnn (the twin of models::CifarCnn, shared
with the parity oracle gen_cnn.py), f32, in training mode; the step is zero_grad, forward, cross
entropy with label smoothing 0.2, backward, SGD (Nesterov momentum 0.9, weight decay 5e-4). With
--device cuda the model and batch are channels-last on the GPU, --dtype bf16 runs the forward under
torch.autocast, and every step ends with torch.cuda.synchronize(). Prints {"images_per_s": ...,
"torch": ..., "threads": ..., and on the CPU blas_report's "blas", "blas_core", "blas_note"}.
"""
import argparse
import json

from bench_util import (blas_report, dtype_arg, median_seconds, prepare_openblas,  # noqa: E402
                        use_reference_models)

prepare_openblas()
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
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", type=dtype_arg, choices=["f32", "bf16"], default="f32")
    args = ap.parse_args()
    dev = torch.device(args.device)
    fmt = torch.channels_last if args.device == "cuda" else torch.contiguous_format
    torch.set_num_threads(args.threads)
    blas = blas_report(torch) if args.device == "cpu" else {}
    torch.manual_seed(0)
    model = CifarCnn(WIDTHS[args.model]).train().to(device=dev, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(args.batch, 3, 32, 32).to(device=dev, memory_format=fmt)
    y = torch.randint(0, 10, (args.batch,)).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.2)
        loss.backward()
        opt.step()
        if args.device == "cuda":
            torch.cuda.synchronize()

    t = median_seconds(step, args.min_iters)
    print(json.dumps({"images_per_s": args.batch / t, "torch": torch.__version__, "threads": torch.get_num_threads(),
                      **blas}))


if __name__ == "__main__":
    main()
