"""PyTorch side of apps/bench_gpt: one GPT training step (forward, loss, backward, AdamW step,
zero_grad) of tests/parity/torch_gpt.py's GPT (the twin of kiln::models::GPT, shared with the parity
oracle) with the config, batch, device, dtype, threads and timing rule the C++ side passes.

--device cpu: f32 (or --dtype bf16: CPU autocast), torch.optim.AdamW.
--device cuda: --dtype bf16 is torch.autocast('cuda', torch.bfloat16) around forward and loss with
f32 master weights, torch.optim.AdamW(fused=True); every timed step is bracketed by
torch.cuda.synchronize(); the peak is torch.cuda.max_memory_allocated() over the timed steps.
--mode compile wraps the model in torch.compile (torch >= 2.0); its compilation happens in the
warm-up steps. --attention auto picks F.scaled_dot_product_attention(is_causal=True) where this
torch has it, else the manual masked softmax. --recompute [block|attention|mlp]
checkpoints every block or that half of it (torch.utils.checkpoint, non-reentrant), as Kiln's
GPT::set_recompute.

Prints one JSON line on stdout: {"step_s" (median of the timed steps), "params", "torch",
"threads", "device", "dtype", "mode", "attention", "fused_adamw", "recompute", "peak_bytes" (cuda;
else 0), "blas" (the CPU's BLAS library; "-" on cuda), on the CPU "blas_core" and "blas_note"
(apps/bench_util.py's blas_report)},
or, when the step cannot run, {"error": "...", "oom": true|false} and exits with status 1.
"""
import argparse
import inspect
import json
import sys
import time
import traceback

from bench_util import blas_report, dtype_arg, prepare_openblas, use_reference_models  # noqa: E402

prepare_openblas()
use_reference_models()
import torch  # noqa: E402
from torch_gpt import ATTENTIONS, GPT, GPTConfig  # noqa: E402


def is_oom(e):
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom_type is not None and isinstance(e, oom_type)) or "out of memory" in str(e).lower()


def fail(message, oom=False):
    print(json.dumps({"error": message, "oom": oom}))
    sys.stdout.flush()
    sys.exit(1)


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def make_optimizer(params, device):
    kwargs = dict(lr=3e-4, weight_decay=0.1)
    fused = device == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    if fused:
        kwargs["fused"] = True
    return torch.optim.AdamW(params, **kwargs), fused


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", type=dtype_arg, choices=["f32", "bf16"], default=None,
                    help="default: f32 on cpu, bf16 on cuda")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--attention", choices=ATTENTIONS, default="auto")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--padded-vocab", type=int, default=256)
    ap.add_argument("--recompute", nargs="?", const="block", default="none",
                    choices=["none", "block", "attention", "mlp"], help="activation checkpointing (alone: per block)")
    a = ap.parse_args()
    dtype = a.dtype or ("bf16" if a.device == "cuda" else "f32")
    if a.device == "cuda" and not torch.cuda.is_available():
        fail(f"torch {torch.__version__} sees no CUDA device")
    if a.mode == "compile" and not hasattr(torch, "compile"):
        fail(f"torch.compile needs torch >= 2.0; this is {torch.__version__}")
    torch.set_num_threads(a.threads)
    blas = blas_report(torch) if a.device == "cpu" else {"blas": "-"}
    torch.manual_seed(0)

    config = GPTConfig(a.vocab, a.padded_vocab, a.block, a.n_layer, a.n_head, a.n_embd)
    try:
        model = GPT(config, attention=a.attention, recompute=a.recompute).to(a.device)
        model.train()
        params = sum(p.numel() for p in model.parameters())
        opt, fused = make_optimizer(model.parameters(), a.device)
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device)
        targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device)
    except Exception as e:  # noqa: BLE001 -- reported to the C++ side, which prints it in the table
        fail(f"setup failed: {first_line(e)}", is_oom(e))
    step_model = torch.compile(model) if a.mode == "compile" else model
    cuda = a.device == "cuda"

    def step():
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            _, loss = step_model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    try:
        for _ in range(a.warmup):
            step()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(a.steps):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001
        if not is_oom(e):
            traceback.print_exc(file=sys.stderr)
        what = "torch.compile step failed" if a.mode == "compile" else "step failed"
        fail("out of memory" if is_oom(e) else f"{what}: {first_line(e)}", is_oom(e))
    times.sort()
    print(json.dumps({"step_s": times[len(times) // 2], "params": params, "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "device": a.device, "dtype": dtype, "mode": a.mode,
                      "attention": model.attention, "fused_adamw": fused, "recompute": a.recompute,
                      "peak_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
                      **blas}))


if __name__ == "__main__":
    main()
