"""PyTorch parity oracle for kiln/core: writes seeded inputs and torch's outputs to safetensors.

Usage: /usr/bin/python3 gen_core.py OUT.safetensors
Each case stores "<case>.in<k>" inputs and "<case>.out<k>" outputs; tests/parity/test_parity_core.cpp
runs the same op in Kiln on the inputs and compares. Both sides must list the same case names.
"""
import parity_oracle  # first: exits 77 (skipped) where this python has no torch
import torch
import torch.nn.functional as F

torch.manual_seed(1234)
cases = {}


def case(name, inputs, outputs):
    for k, t in enumerate(inputs):
        cases[f"{name}.in{k}"] = t
    for k, t in enumerate(outputs if isinstance(outputs, (list, tuple)) else [outputs]):
        cases[f"{name}.out{k}"] = t


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def pos(*shape, dtype=torch.float32):
    return (torch.rand(*shape, dtype=torch.float64) * 3 + 0.1).to(dtype)


# Elementwise, unary.
x = randn(7, 33)
p = pos(7, 33)
for name, fn, inp in [
    ("neg", torch.neg, x), ("abs", torch.abs, x), ("exp", torch.exp, x), ("log", torch.log, p),
    ("sqrt", torch.sqrt, p), ("rsqrt", torch.rsqrt, p), ("tanh", torch.tanh, x), ("sigmoid", torch.sigmoid, x),
    ("relu", torch.relu, x), ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh"), x), ("gelu_erf", F.gelu, x),
    ("square", torch.square, x),
]:
    case(name, [inp], fn(inp))
xb = randn(7, 33, dtype=torch.bfloat16)
case("gelu_tanh_bf16", [xb], F.gelu(xb, approximate="tanh"))
xh = randn(7, 33, dtype=torch.float16)
case("exp_f16", [xh], torch.exp(xh.float()).half())  # torch 1.13 has no CPU half exp

# Elementwise, binary (broadcasting) and scalar.
a, b, bp = randn(4, 1, 6), randn(5, 1), pos(5, 1)
case("add", [a, b], a + b)
case("sub", [a, b], a - b)
case("mul", [a, b], a * b)
case("div", [a, bp], a / bp)
pa = pos(4, 1, 6)
case("pow", [pa, b], torch.pow(pa, b))
case("maximum", [a, b], torch.maximum(a, b))
case("minimum", [a, b], torch.minimum(a, b))
ab, bb = randn(4, 1, 6, dtype=torch.bfloat16), randn(5, 1, dtype=torch.bfloat16)
case("add_bf16", [ab, bb], ab + bb)
ai, bi = torch.randint(-50, 50, (3, 4)), torch.randint(1, 9, (4,), dtype=torch.int32)
case("add_int", [ai, bi], ai + bi)
case("div_int", [ai, bi], ai / bi)
case("add_scalar", [x], x + 1.5)
case("rsub_scalar", [x], 1.5 - x)
case("mul_scalar", [x], x * -2.0)
case("div_scalar", [x], x / 4.0)
case("pow_scalar", [p], p ** 1.7)
ar, br = a.round(), b.round()
case("eq", [ar, br], ar == br)
case("lt", [a, b], a < b)
case("ge", [a, b], a >= b)
cond = randn(3, 4) > 0
wy = randn(4, dtype=torch.float64)
wx = randn(3, 4)
case("where", [cond, wx, wy], torch.where(cond, wx, wy))
mask = torch.arange(4).view(1, 4) < 2
case("masked_fill", [wx, mask], wx.masked_fill(mask, -1e9))

# Conversions: rounding to nearest even, specials.
special = torch.tensor([0.0, -0.0, 1.0, 65504.0, 65520.0, 1e-8, 3e-5, 1e38, -1e38, float("inf"), float("-inf"),
                        float("nan"), 1.00390625, 1.01171875], dtype=torch.float32)
conv_in = torch.cat([special, randn(2000) * 100, randn(2000) * 1e-3, randn(2000) * 1e-6])
case("to_bf16", [conv_in], conv_in.to(torch.bfloat16))
case("to_f16", [conv_in], conv_in.to(torch.float16))
case("to_i64", [x * 10], (x * 10).to(torch.int64))
case("to_bool", [ar], ar.to(torch.bool))

# Reductions.
r = randn(4, 5, 6)
case("sum_dims", [r], r.sum(dim=(0, 2)))
case("sum_all", [r], r.sum())
case("mean_keepdim", [r], r.mean(dim=1, keepdim=True))
case("amax", [r], r.amax(dim=-1))
mv = r.max(dim=1)
case("max_dim", [r], [mv.values, mv.indices])
case("argmax", [r], r.argmax(dim=2))
case("var", [r], r.var(dim=1))
case("sum_int", [ai], ai.sum(dim=0))
rb = randn(64, 50, dtype=torch.bfloat16)
case("sum_bf16", [rb], rb.sum(dim=1))

# Softmax family.
s = randn(8, 33) * 3
case("softmax", [s], torch.softmax(s, dim=-1))
case("softmax_dim0", [s], torch.softmax(s, dim=0))
case("log_softmax", [s], torch.log_softmax(s, dim=-1))
sb = s.to(torch.bfloat16)
case("softmax_bf16", [sb], torch.softmax(sb, dim=-1))

# Layer norm: out, mean, rstd.
lx, lw, lb = randn(4, 7, 16), randn(16), randn(16)
out, mean, rstd = torch.native_layer_norm(lx, [16], lw, lb, 1e-5)
case("layer_norm", [lx, lw, lb], [out, mean.reshape(-1), rstd.reshape(-1)])

# Matmul family.
m1, m2 = randn(33, 65), randn(65, 17)
case("matmul", [m1, m2], m1 @ m2)
mt = randn(65, 33)
case("matmul_t", [mt, m2], mt.t() @ m2)
b1, b2 = randn(3, 5, 6), randn(3, 6, 4)
case("bmm", [b1, b2], torch.bmm(b1, b2))
c1, c2 = randn(2, 1, 5, 6), randn(3, 6, 4)
case("matmul_bcast", [c1, c2], c1 @ c2)
lin_x, lin_w, lin_b = randn(5, 7), randn(3, 7), randn(3)
case("linear", [lin_x, lin_w, lin_b], F.linear(lin_x, lin_w, lin_b))
mb1, mb2 = randn(16, 64, dtype=torch.bfloat16), randn(64, 8, dtype=torch.bfloat16)
case("matmul_bf16", [mb1, mb2], (mb1.float() @ mb2.float()).to(torch.bfloat16))

# Convolution and pooling.
cx, cw, cb = randn(2, 4, 9, 9), randn(6, 4, 3, 3), randn(6)
co = F.conv2d(cx, cw, cb, stride=2, padding=1)
case("conv2d", [cx, cw, cb], co)
gx, gw = randn(2, 4, 11, 11), randn(6, 2, 3, 3)
case("conv2d_groups", [gx, gw], F.conv2d(gx, gw, None, stride=1, padding=2, dilation=2, groups=2))
go = randn(*co.shape)
case("conv2d_backward", [cx, cw, go], [torch.nn.grad.conv2d_input(cx.shape, cw, go, stride=2, padding=1),
                                       torch.nn.grad.conv2d_weight(cx, cw.shape, go, stride=2, padding=1)])
px = randn(2, 3, 9, 8)
pv, pi = F.max_pool2d(px, 3, stride=2, padding=1, return_indices=True)
case("max_pool2d", [px], [pv, pi])
case("avg_pool2d", [px], F.avg_pool2d(px, 2, stride=2))
case("adaptive_avg_pool2d", [px], F.adaptive_avg_pool2d(px, (3, 2)))

# Indexing.
ix = randn(6, 5)
sel = torch.tensor([4, 0, 4, 2])
case("index_select", [ix, sel], ix.index_select(0, sel))
gidx = torch.randint(0, 5, (6, 3))
case("gather", [ix, gidx], ix.gather(1, gidx))
src = randn(6, 3)
case("scatter_add", [ix, gidx, src], ix.scatter_add(1, gidx, src))
ew = randn(10, 4)
ids = torch.randint(0, 10, (3, 5))
case("embedding", [ew, ids], F.embedding(ids, ew))
eg = randn(3, 5, 4)
case("embedding_backward", [eg, ids], torch.zeros(10, 4).index_add_(0, ids.reshape(-1), eg.reshape(-1, 4)))

# Joining and splitting.
j1, j2 = randn(2, 3), randn(2, 5)
case("cat", [j1, j2], torch.cat([j1, j2], dim=1))
k1, k2 = randn(2, 3), randn(2, 3)
case("stack", [k1, k2], torch.stack([k1, k2], dim=1))
sp = randn(7, 4)
case("split", [sp], list(torch.split(sp, [2, 4, 1], dim=0)))
case("chunk", [sp], list(torch.chunk(sp, 3, dim=0)))

# Triangles.
t = randn(2, 4, 5)
case("triu", [t], torch.triu(t, diagonal=1))
case("tril", [t], torch.tril(t, diagonal=-1))

parity_oracle.write(cases, what=f"{len({k.split('.')[0] for k in cases})} cases")
