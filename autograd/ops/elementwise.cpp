// Differentiable elementwise ops: the raw kernels from kiln::ops plus one backward node each.
#include <kiln/autograd/ops/elementwise.h>

#include <array>

#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln {

using autograd::OpNode;
using autograd::saved;

namespace {

// The backward of one op: (grad, saved tensors, the op's scalar) -> one gradient per input.
template <size_t N>
using Backward = std::vector<Tensor> (*)(const Tensor& g, const std::array<Tensor, N>& s, double scalar);

// Records `out` = op(inputs) with backward `fn` over the tensors in `keep` (saved detached).
template <size_t N>
Tensor record(Tensor out, const char* name, Backward<N> fn, std::initializer_list<const Tensor*> inputs,
              std::array<Tensor, N> keep, double scalar = 0.0) {
  std::vector<Tensor> in;
  for (const Tensor* t : inputs) in.push_back(*t);
  return autograd::record(std::move(out), name, in, [&] {
    for (Tensor& k : keep) k = saved(k);
    return [fn, s = std::move(keep), scalar](const Tensor& g, const OpNode&) { return fn(g, s, scalar); };
  });
}

std::vector<Tensor> grads_of(Tensor a) { return {std::move(a)}; }
std::vector<Tensor> grads_of(Tensor a, Tensor b) { return {std::move(a), std::move(b)}; }
std::vector<Tensor> grads_of(Tensor a, Tensor b, Tensor c) { return {std::move(a), std::move(b), std::move(c)}; }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return record<0>(ops::add(a, b), "AddBackward", [](const Tensor& g, const auto&, double) { return grads_of(g, g); },
                   {&a, &b}, {});
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return record<0>(ops::sub(a, b), "SubBackward",
                   [](const Tensor& g, const auto&, double) { return grads_of(g, ops::neg(g)); }, {&a, &b}, {});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return record<2>(ops::mul(a, b), "MulBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::mul(g, s[1]), ops::mul(g, s[0])); },
                   {&a, &b}, {a, b});
}
Tensor div(const Tensor& a, const Tensor& b) {
  return record<2>(ops::div(a, b), "DivBackward",
                   [](const Tensor& g, const auto& s, double) {
                     Tensor ga = ops::div(g, s[1]);
                     return grads_of(ga, ops::neg(ops::div(ops::mul(ga, s[0]), s[1])));
                   },
                   {&a, &b}, {a, b});
}
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = ops::pow(a, b);
  return record<3>(out, "PowBackward",
                   [](const Tensor& g, const auto& s, double) {
                     // d/da = b a^(b-1); d/db = a^b log a (0 where a == 0, as torch).
                     Tensor ga = ops::mul(g, ops::mul(s[1], ops::pow(s[0], ops::sub(s[1], 1.0))));
                     Tensor loga = ops::where(ops::eq(s[0], 0.0), zeros_like(s[0]), ops::log(s[0]));
                     return grads_of(ga, ops::mul(g, ops::mul(s[2], loga)));
                   },
                   {&a, &b}, {a, b, out});
}
static std::vector<Tensor> minmax_backward(const Tensor& g, const std::array<Tensor, 2>& s, bool is_max) {
  // Ties split the gradient evenly, like torch.
  Tensor a_wins = is_max ? ops::gt(s[0], s[1]) : ops::lt(s[0], s[1]);
  Tensor tie = ops::eq(s[0], s[1]);
  Tensor wa = ops::add(ops::where(a_wins, ones({}), zeros({})), ops::where(tie, full({}, 0.5), zeros({})));
  return grads_of(ops::mul(g, wa), ops::mul(g, ops::rsub(wa, 1.0)));
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return record<2>(ops::maximum(a, b), "MaximumBackward",
                   [](const Tensor& g, const auto& s, double) { return minmax_backward(g, s, true); }, {&a, &b},
                   {a, b});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return record<2>(ops::minimum(a, b), "MinimumBackward",
                   [](const Tensor& g, const auto& s, double) { return minmax_backward(g, s, false); }, {&a, &b},
                   {a, b});
}

Tensor add(const Tensor& a, double b) {
  return record<0>(ops::add(a, b), "AddBackward", [](const Tensor& g, const auto&, double) { return grads_of(g); },
                   {&a}, {});
}
Tensor sub(const Tensor& a, double b) { return add(a, -b); }
Tensor rsub(const Tensor& a, double b) {
  return record<0>(ops::rsub(a, b), "RsubBackward",
                   [](const Tensor& g, const auto&, double) { return grads_of(ops::neg(g)); }, {&a}, {});
}
Tensor mul(const Tensor& a, double b) {
  return record<0>(ops::mul(a, b), "MulBackward",
                   [](const Tensor& g, const auto&, double k) { return grads_of(ops::mul(g, k)); }, {&a}, {}, b);
}
Tensor div(const Tensor& a, double b) {
  return record<0>(ops::div(a, b), "DivBackward",
                   [](const Tensor& g, const auto&, double k) { return grads_of(ops::div(g, k)); }, {&a}, {}, b);
}
Tensor pow(const Tensor& a, double e) {
  return record<1>(ops::pow(a, e), "PowBackward",
                   [](const Tensor& g, const auto& s, double k) {
                     return grads_of(ops::mul(g, ops::mul(ops::pow(s[0], k - 1.0), k)));
                   },
                   {&a}, {a}, e);
}

Tensor neg(const Tensor& x) {
  return record<0>(ops::neg(x), "NegBackward", [](const Tensor& g, const auto&, double) { return grads_of(ops::neg(g)); },
                   {&x}, {});
}
Tensor abs(const Tensor& x) {
  return record<1>(ops::abs(x), "AbsBackward",
                   [](const Tensor& g, const auto& s, double) {
                     Tensor sign = ops::sub(ops::gt(s[0], 0.0).to(g.dtype()), ops::lt(s[0], 0.0).to(g.dtype()));
                     return grads_of(ops::mul(g, sign));
                   },
                   {&x}, {x});
}
Tensor exp(const Tensor& x) {
  Tensor out = ops::exp(x);
  return record<1>(out, "ExpBackward", [](const Tensor& g, const auto& s, double) { return grads_of(ops::mul(g, s[0])); },
                   {&x}, {out});
}
Tensor log(const Tensor& x) {
  return record<1>(ops::log(x), "LogBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::div(g, s[0])); }, {&x}, {x});
}
Tensor sqrt(const Tensor& x) {
  Tensor out = ops::sqrt(x);
  return record<1>(out, "SqrtBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::div(ops::mul(g, 0.5), s[0])); },
                   {&x}, {out});
}
Tensor rsqrt(const Tensor& x) {
  Tensor out = ops::rsqrt(x);
  return record<1>(out, "RsqrtBackward",
                   [](const Tensor& g, const auto& s, double) {
                     // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
                     return grads_of(ops::mul(g, ops::mul(ops::mul(ops::square(s[0]), s[0]), -0.5)));
                   },
                   {&x}, {out});
}
Tensor square(const Tensor& x) {
  return record<1>(ops::square(x), "SquareBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::mul(g, ops::mul(s[0], 2.0))); },
                   {&x}, {x});
}
Tensor tanh(const Tensor& x) {
  Tensor out = ops::tanh(x);
  return record<1>(out, "TanhBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::mul(g, ops::rsub(ops::square(s[0]), 1.0))); },
                   {&x}, {out});
}
Tensor sigmoid(const Tensor& x) {
  Tensor out = ops::sigmoid(x);
  return record<1>(out, "SigmoidBackward",
                   [](const Tensor& g, const auto& s, double) {
                     return grads_of(ops::mul(g, ops::mul(s[0], ops::rsub(s[0], 1.0))));
                   },
                   {&x}, {out});
}
Tensor relu(const Tensor& x) {
  Tensor out = ops::relu(x);
  return record<1>(out, "ReluBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::mul(g, ops::gt(s[0], 0.0).to(g.dtype()))); },
                   {&x}, {out});
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  // One fused kernel per backward (ops::gelu_*_backward) on either device.
  if (approximate == GeluApproximate::tanh) {
    return record<1>(
        ops::gelu_tanh(x), "GeluTanhBackward",
        [](const Tensor& g, const auto& s, double) { return grads_of(ops::gelu_tanh_backward(g, s[0])); }, {&x}, {x});
  }
  return record<1>(ops::gelu_erf(x), "GeluBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::gelu_erf_backward(g, s[0])); },
                   {&x}, {x});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return record<1>(ops::where(cond, a, b), "WhereBackward",
                   [](const Tensor& g, const auto& s, double) {
                     Tensor z = zeros({}, g.dtype());
                     return grads_of(Tensor(), ops::where(s[0], g, z), ops::where(s[0], z, g));
                   },
                   {&cond, &a, &b}, {cond});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return record<1>(ops::masked_fill(x, mask, value), "MaskedFillBackward",
                   [](const Tensor& g, const auto& s, double) { return grads_of(ops::masked_fill(g, s[0], 0.0)); },
                   {&x}, {mask});
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }

}  // namespace kiln
