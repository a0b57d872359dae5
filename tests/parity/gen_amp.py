"""PyTorch parity oracle for mixed precision: GradScaler decisions and a bf16 autocast forward.

Usage: /usr/bin/python3 gen_amp.py OUT.safetensors

1. GradScaler. torch 1.13's GradScaler is CUDA-only: on the CPU it disables itself, and its two
   kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) have no CPU
   implementation. So this runs torch's own GradScaler class (its per-optimizer stages, step
   skipping, found_inf combination and call order) with enabled forced on, CPU tensors, and the
   two kernels replaced by line-by-line Python transcriptions of their CUDA versions
   (aten/src/ATen/native/cuda/AmpKernels.cu). Each step: loss = sum_k sum(p_k * c_k) with c_k the
   step's gradient (some with inf/NaN, one that overflows only once scaled), scaled, backward,
   unscale_, clip_grad_norm_(1.0), step, update, with SGD(lr=0.1, momentum=0.9).
   Inputs "scaler.init.<k>", "scaler.grad.<s>.<k>" (f32); outputs after step s:
   "scaler.stepped.<s>" (u8), "scaler.scale.<s>" (f32), "scaler.tracker.<s>" (i64),
   "scaler.param.<s>.<k>" (f32). Options in metadata: init_scale, growth_interval.
2. Autocast: linear -> gelu -> linear -> cross_entropy under torch.autocast('cpu', bfloat16).
   Inputs "ac.x", "ac.target", "ac.w1", "ac.b1", "ac.w2", "ac.b2"; outputs "ac.logits" (bf16),
   "ac.loss" (f32), "ac.grad.<name>" (f32), and the same model in plain f32 as "f32.logits",
   "f32.loss". "ref.logits" (bf16): the semantics Kiln's autocast claims (bf16 inputs, f32
   accumulation, one rounding per op), computed without torch's bf16 kernels, whose rounding
   depends on the CPU (parity_oracle.bf16_as_avx2).
"""
import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
import torch.cuda.amp.grad_scaler as grad_scaler
import torch.nn.functional as F


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # AmpKernels.cu: found_inf = 1 if any element is not finite; every element *= inv_scale.
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        g.mul_(inv_scale)


def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    # AmpKernels.cu amp_update_scale_cuda_kernel, on the f32 scale and the i32 tracker.
    if found_inf.item():
        scale.mul_(backoff_factor)
        growth_tracker.fill_(0)
    else:
        successful = int(growth_tracker.item()) + 1
        if successful == growth_interval:
            new_scale = scale * growth_factor  # f32
            if torch.isfinite(new_scale).all():
                scale.copy_(new_scale)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale


class CpuReplicator(grad_scaler._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # the original asserts is_cuda
        self.master = master_tensor
        self._per_device_tensors = {}


torch._amp_foreach_non_finite_check_and_unscale_ = non_finite_check_and_unscale_
torch._amp_update_scale_ = update_scale_
grad_scaler._MultiDeviceReplicator = CpuReplicator

out = {}
torch.manual_seed(2024)

# --- 1. GradScaler decisions --------------------------------------------------------------
INIT_SCALE, GROWTH_INTERVAL, STEPS = 2.0**16, 4, 26
SHAPES = [(4, 3), (5,)]
inits = [torch.randn(*s) for s in SHAPES]
grads = [[torch.randn(*s) * 0.5 for s in SHAPES] for _ in range(STEPS)]
grads[2][0][1, 2] = float("inf")
grads[3][1][4] = float("nan")
grads[9][0][0, 0] = -float("inf")
grads[12][1][0] = 1e35  # finite, but overflows f32 once multiplied by the scale
grads[17][0][3, 1] = float("inf")
grads[18][1][2] = float("inf")  # two backoffs in a row
for k, t in enumerate(inits):
    out[f"scaler.init.{k}"] = t
for s in range(STEPS):
    for k in range(len(SHAPES)):
        out[f"scaler.grad.{s}.{k}"] = grads[s][k]

with __import__("warnings").catch_warnings():
    __import__("warnings").simplefilter("ignore")  # "CUDA is not available. Disabling."
    scaler = torch.cuda.amp.GradScaler(init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL)
scaler._enabled = True
scaler._init_scale, scaler._scale, scaler._growth_tracker = INIT_SCALE, None, None
scaler._growth_factor, scaler._backoff_factor, scaler._growth_interval = 2.0, 0.5, GROWTH_INTERVAL
scaler._init_growth_tracker = 0
scaler._per_optimizer_states = __import__("collections").defaultdict(grad_scaler._refresh_per_optimizer_state)
scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))

params = [t.clone().requires_grad_() for t in inits]
opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
skipped = 0
for s in range(STEPS):
    opt.zero_grad(set_to_none=True)
    loss = sum((p * c).sum() for p, c in zip(params, grads[s]))
    (loss * scaler._scale).backward()  # what scaler.scale(loss) returns, minus its is_cuda assert
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    found = sum(v.item() for v in scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
    scaler.step(opt)
    scaler.update()
    skipped += bool(found)
    out[f"scaler.stepped.{s}"] = torch.tensor(0 if found else 1, dtype=torch.uint8)
    out[f"scaler.scale.{s}"] = scaler._scale.reshape(()).clone()
    out[f"scaler.tracker.{s}"] = scaler._growth_tracker.reshape(()).to(torch.int64)
    for k, p in enumerate(params):
        out[f"scaler.param.{s}.{k}"] = p.detach().clone()
assert skipped == 6, skipped

# --- 2. bf16 autocast forward ---------------------------------------------------------------
x = torch.randn(8, 16)
target = torch.randint(0, 5, (8,))
weights = {"w1": torch.randn(32, 16) * 0.25, "b1": torch.randn(32) * 0.1,
           "w2": torch.randn(5, 32) * 0.25, "b2": torch.randn(5) * 0.1}
out["ac.x"], out["ac.target"] = x, target
for name, w in weights.items():
    out[f"ac.{name}"] = w


def forward(w):
    h = F.gelu(F.linear(x, w["w1"], w["b1"]))
    logits = F.linear(h, w["w2"], w["b2"])
    return logits, F.cross_entropy(logits, target)


ws = {n: w.clone().requires_grad_() for n, w in weights.items()}
with parity_oracle.bf16_as_avx2():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = forward(ws)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
out["ac.logits"], out["ac.loss"] = logits.detach(), loss.detach()
for n, w in ws.items():
    assert w.grad.dtype == torch.float32
    out[f"ac.grad.{n}"] = w.grad
logits32, loss32 = forward(weights)
out["f32.logits"], out["f32.loss"] = logits32, loss32


# What Kiln's autocast claims to compute, written out independently of torch's kernels: each op
# takes bf16-rounded inputs, accumulates in f32 (f64 here, then one rounding to f32) and rounds its
# output to bf16 once.
def bf16(t):
    return t.bfloat16().double()


def linear_bf16(a, w, b):
    return ((bf16(a) @ bf16(w).T + bf16(b)).float()).bfloat16()


h_ref = linear_bf16(x, weights["w1"], weights["b1"])
g_ref = F.gelu(h_ref.double()).float().bfloat16()
out["ref.logits"] = linear_bf16(g_ref, weights["w2"], weights["b2"])

parity_oracle.write(out, {"init_scale": str(INIT_SCALE), "growth_interval": str(GROWTH_INTERVAL)},
                    what=f"{len(out)} tensors ({skipped} of {STEPS} steps skipped)")
