// Differentiable elementwise ops: the raw kernels from kiln::ops plus one backward node each.
#include <kiln/autograd/ops/elementwise.h>

#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln {

using autograd::Grads;
using autograd::Needs;
using autograd::record;
using autograd::saved;

namespace {

// Ties split the gradient evenly, like torch.
Grads minmax_backward(const Tensor& g, const Tensor& a, const Tensor& b, bool is_max) {
  Tensor a_wins = is_max ? ops::gt(a, b) : ops::lt(a, b);
  Tensor tie = ops::eq(a, b);
  Tensor wa = ops::add(ops::where(a_wins, ones({}), zeros({})), ops::where(tie, full({}, 0.5), zeros({})));
  return {ops::mul(g, wa), ops::mul(g, ops::rsub(wa, 1.0))};
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return record(ops::add(a, b), "AddBackward", {&a, &b},
                [](const Needs&) { return [](const Tensor& g) -> Grads { return {g, g}; }; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return record(ops::sub(a, b), "SubBackward", {&a, &b},
                [](const Needs&) { return [](const Tensor& g) -> Grads { return {g, ops::neg(g)}; }; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return record(ops::mul(a, b), "MulBackward", {&a, &b}, [&](const Needs&) {
    return [a = saved(a), b = saved(b)](const Tensor& g) -> Grads { return {ops::mul(g, b), ops::mul(g, a)}; };
  });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return record(ops::div(a, b), "DivBackward", {&a, &b}, [&](const Needs&) {
    return [a = saved(a), b = saved(b)](const Tensor& g) -> Grads {
      Tensor ga = ops::div(g, b);
      return {ga, ops::neg(ops::div(ops::mul(ga, a), b))};
    };
  });
}
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = ops::pow(a, b);
  return record(out, "PowBackward", {&a, &b}, [&](const Needs&) {
    return [a = saved(a), b = saved(b), out = saved(out)](const Tensor& g) -> Grads {
      // d/da = b a^(b-1); d/db = a^b log a (0 where a == 0, as torch).
      Tensor ga = ops::mul(g, ops::mul(b, ops::pow(a, ops::sub(b, 1.0))));
      Tensor loga = ops::where(ops::eq(a, 0.0), zeros_like(a), ops::log(a));
      return {ga, ops::mul(g, ops::mul(out, loga))};
    };
  });
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return record(ops::maximum(a, b), "MaximumBackward", {&a, &b}, [&](const Needs&) {
    return [a = saved(a), b = saved(b)](const Tensor& g) { return minmax_backward(g, a, b, true); };
  });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return record(ops::minimum(a, b), "MinimumBackward", {&a, &b}, [&](const Needs&) {
    return [a = saved(a), b = saved(b)](const Tensor& g) { return minmax_backward(g, a, b, false); };
  });
}

Tensor add(const Tensor& a, double b) {
  return record(ops::add(a, b), "AddBackward", {&a}, [](const Needs&) { return [](const Tensor& g) { return g; }; });
}
Tensor sub(const Tensor& a, double b) { return add(a, -b); }
Tensor rsub(const Tensor& a, double b) {
  return record(ops::rsub(a, b), "RsubBackward", {&a},
                [](const Needs&) { return [](const Tensor& g) { return ops::neg(g); }; });
}
Tensor mul(const Tensor& a, double b) {
  return record(ops::mul(a, b), "MulBackward", {&a},
                [b](const Needs&) { return [b](const Tensor& g) { return ops::mul(g, b); }; });
}
Tensor div(const Tensor& a, double b) {
  return record(ops::div(a, b), "DivBackward", {&a},
                [b](const Needs&) { return [b](const Tensor& g) { return ops::div(g, b); }; });
}
Tensor pow(const Tensor& a, double e) {
  return record(ops::pow(a, e), "PowBackward", {&a}, [&](const Needs&) {
    return [a = saved(a), e](const Tensor& g) { return ops::mul(g, ops::mul(ops::pow(a, e - 1.0), e)); };
  });
}

Tensor neg(const Tensor& x) {
  return record(ops::neg(x), "NegBackward", {&x},
                [](const Needs&) { return [](const Tensor& g) { return ops::neg(g); }; });
}
Tensor abs(const Tensor& x) {
  return record(ops::abs(x), "AbsBackward", {&x}, [&](const Needs&) {
    return [x = saved(x)](const Tensor& g) {
      Tensor sign = ops::sub(ops::gt(x, 0.0).to(g.dtype()), ops::lt(x, 0.0).to(g.dtype()));
      return ops::mul(g, sign);
    };
  });
}
Tensor exp(const Tensor& x) {
  Tensor out = ops::exp(x);
  return record(out, "ExpBackward", {&x},
                [&](const Needs&) { return [out = saved(out)](const Tensor& g) { return ops::mul(g, out); }; });
}
Tensor log(const Tensor& x) {
  return record(ops::log(x), "LogBackward", {&x},
                [&](const Needs&) { return [x = saved(x)](const Tensor& g) { return ops::div(g, x); }; });
}
Tensor sqrt(const Tensor& x) {
  Tensor out = ops::sqrt(x);
  return record(out, "SqrtBackward", {&x}, [&](const Needs&) {
    return [out = saved(out)](const Tensor& g) { return ops::div(ops::mul(g, 0.5), out); };
  });
}
Tensor rsqrt(const Tensor& x) {
  Tensor out = ops::rsqrt(x);
  return record(out, "RsqrtBackward", {&x}, [&](const Needs&) {
    // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
    return [out = saved(out)](const Tensor& g) { return ops::mul(g, ops::mul(ops::mul(ops::square(out), out), -0.5)); };
  });
}
Tensor square(const Tensor& x) {
  return record(ops::square(x), "SquareBackward", {&x},
                [&](const Needs&) { return [x = saved(x)](const Tensor& g) { return ops::mul(g, ops::mul(x, 2.0)); }; });
}
Tensor tanh(const Tensor& x) {
  Tensor out = ops::tanh(x);
  return record(out, "TanhBackward", {&x}, [&](const Needs&) {
    return [out = saved(out)](const Tensor& g) { return ops::mul(g, ops::rsub(ops::square(out), 1.0)); };
  });
}
Tensor sin(const Tensor& x) {
  return record(ops::sin(x), "SinBackward", {&x},
                [&](const Needs&) { return [x = saved(x)](const Tensor& g) { return ops::mul(g, ops::cos(x)); }; });
}
Tensor cos(const Tensor& x) {
  return record(ops::cos(x), "CosBackward", {&x}, [&](const Needs&) {
    return [x = saved(x)](const Tensor& g) { return ops::mul(g, ops::neg(ops::sin(x))); };
  });
}
Tensor sigmoid(const Tensor& x) {
  Tensor out = ops::sigmoid(x);
  return record(out, "SigmoidBackward", {&x}, [&](const Needs&) {
    return [out = saved(out)](const Tensor& g) { return ops::mul(g, ops::mul(out, ops::rsub(out, 1.0))); };
  });
}
Tensor relu(const Tensor& x) {
  Tensor out = ops::relu(x);
  return record(out, "ReluBackward", {&x}, [&](const Needs&) {
    return [out = saved(out)](const Tensor& g) { return ops::mul(g, ops::gt(out, 0.0).to(g.dtype())); };
  });
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  // One fused kernel per backward (ops::gelu_*_backward) on either device.
  if (approximate == GeluApproximate::tanh) {
    return record(ops::gelu_tanh(x), "GeluTanhBackward", {&x}, [&](const Needs&) {
      return [x = saved(x)](const Tensor& g) { return ops::gelu_tanh_backward(g, x); };
    });
  }
  return record(ops::gelu_erf(x), "GeluBackward", {&x},
                [&](const Needs&) { return [x = saved(x)](const Tensor& g) { return ops::gelu_erf_backward(g, x); }; });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return record(ops::where(cond, a, b), "WhereBackward", {&cond, &a, &b}, [&](const Needs&) {
    return [cond = saved(cond)](const Tensor& g) -> Grads {
      Tensor z = zeros({}, g.dtype());
      return {Tensor(), ops::where(cond, g, z), ops::where(cond, z, g)};
    };
  });
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return record(ops::masked_fill(x, mask, value), "MaskedFillBackward", {&x}, [&](const Needs&) {
    return [mask = saved(mask)](const Tensor& g) { return ops::masked_fill(g, mask, 0.0); };
  });
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
