// Formulas that the CPU kernels (core/cpu) and the CUDA kernels (core/cuda/kernels) both compute,
// written once so the two backends cannot drift apart. CUDA-free: each backend passes its own math
// as `Math` (static exp, log, sqrt, tanh, erf, pow: core/cpu/vec_math.h VecMath, the CUDA
// functors' DeviceMath).
#pragma once

#include <array>
#include <type_traits>
#include <utility>

#include <kiln/core/host_device.h>
#include <kiln/core/shape.h>

namespace kiln::formulas {

// Note [Conversion to u8]
// A value converted to another dtype: static_cast, except that a floating value goes to uint8_t
// through int64, as torch converts (c10::static_cast_with_inter_type): -2.0 becomes 254, where a
// direct cast is undefined behaviour (and the GPU would saturate it to 0).
template <class To, class From>
KILN_HOST_DEVICE inline To convert(From x) {
  if constexpr (std::is_same_v<To, unsigned char> && std::is_floating_point_v<From>)
    return static_cast<To>(static_cast<long long>(x));
  else
    return static_cast<To>(x);
}

// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). In float,
// 1 + tanh(u) = 2 / (1 + exp(-2u)), which the CPU vectorizes and which stays exact in the tails.
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_tanh(T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
  if constexpr (std::is_same_v<T, float>) return x / (T(1) + Math::exp(T(-2) * u));
  else return T(0.5) * x * (T(1) + Math::tanh(u));
}

// g * d/dx gelu_tanh(x). With s = (1 + tanh u) / 2 = 1 / (1 + exp(-2u)) (so 1 - tanh^2 u =
// 4 s (1 - s)): s + 2 x s (1 - s) c (1 + 3 a x^2), finite in both tails.
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_tanh_backward(T g, T x) {
  const T c = T(0.7978845608028654), a = T(0.044715);
  const T x2 = x * x;
  const T u = c * (x + a * x2 * x);
  const T s = T(1) / (T(1) + Math::exp(T(-2) * u));
  return g * (s + T(2) * x * s * (T(1) - s) * c * (T(1) + T(3) * a * x2));
}

// GELU, exact: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + Math::erf(x * T(0.70710678118654752440)));
}

// g * d/dx x Phi(x) = g (Phi(x) + x phi(x)).
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_erf_backward(T g, T x) {
  const T cdf = T(0.5) * (T(1) + Math::erf(x * T(0.70710678118654752440)));
  const T pdf = Math::exp(T(-0.5) * x * x) * T(0.39894228040143267794);  // 1 / sqrt(2 pi)
  return g * (cdf + x * pdf);
}

// softmax (Log: log_softmax) of x from its row's max m and k = 1 / sum exp(x - m) (Log: k = the
// log-sum-exp, m + log sum exp(x - m)).
template <class Math, bool Log, class T>
KILN_HOST_DEVICE inline T softmax_from_stats(T x, T m, T k) {
  return Log ? x - k : Math::exp(x - m) * k;
}

// softmax's gradient from the forward output y and the row sum s of softmax_grad_term(g, y):
// softmax: gi = y (g - s), s = sum g y; log_softmax: gi = g - exp(y) s, s = sum g.
template <bool Log, class T>
KILN_HOST_DEVICE inline T softmax_grad_term(T g, T y) {
  return Log ? g : g * y;
}
template <class Math, bool Log, class T>
KILN_HOST_DEVICE inline T softmax_grad(T g, T y, T s) {
  return Log ? g - Math::exp(y) * s : y * (g - s);
}

// Note [Elementwise functors]
// Each elementwise op is one functor on compute types (acc_t: float for the 16-bit floats), which
// the CPU maps with cpu::map_kernel (core/cpu/elementwise.cpp) and CUDA with launch_map
// (core/cuda/kernels/elementwise_*.cu); core/ops/elementwise_table.h maps the op enums to them.
// kFloating: the op runs on floating dtypes only (the front casts integer inputs to f32), else on
// every numeric dtype. Integer results wrap as the stores' casts do; integer operands of + - *
// promote to int, and the store casts back.
struct NumericOp {
  static constexpr bool kFloating = false;
};
struct FloatingOp {
  static constexpr bool kFloating = true;
};

// --- unary ---------------------------------------------------------------------------------
struct Neg : NumericOp { template <class T> KILN_HOST_DEVICE T operator()(T v) const { return T(-v); } };
struct Abs : NumericOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const {
    if constexpr (std::is_unsigned_v<T>) return v; else return v < T(0) ? T(-v) : v;
  }
};
struct Relu : NumericOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const {
    if constexpr (std::is_unsigned_v<T>) return v; else return v < T(0) ? T(0) : v;
  }
};
struct Square : NumericOp { template <class T> KILN_HOST_DEVICE T operator()(T v) const { return T(v * v); } };
template <class Math> struct Exp : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return Math::exp(v); }
};
template <class Math> struct Log : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return Math::log(v); }
};
template <class Math> struct Sqrt : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return Math::sqrt(v); }
};
// 1 / sqrt (not a reciprocal-sqrt instruction): both roundings correct on both backends.
template <class Math> struct Rsqrt : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return T(1) / Math::sqrt(v); }
};
template <class Math> struct Tanh : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return Math::tanh(v); }
};
template <class Math> struct Sin : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return Math::sin(v); }
};
template <class Math> struct Cos : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return Math::cos(v); }
};
template <class Math> struct Sigmoid : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return T(1) / (T(1) + Math::exp(-v)); }
};
template <class Math> struct GeluTanh : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return gelu_tanh<Math>(v); }
};
template <class Math> struct GeluErf : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T v) const { return gelu_erf<Math>(v); }
};

// --- binary --------------------------------------------------------------------------------
struct Add : NumericOp { template <class T> KILN_HOST_DEVICE auto operator()(T x, T y) const { return x + y; } };
struct Sub : NumericOp { template <class T> KILN_HOST_DEVICE auto operator()(T x, T y) const { return x - y; } };
struct Rsub : NumericOp { template <class T> KILN_HOST_DEVICE auto operator()(T x, T y) const { return y - x; } };
struct Mul : NumericOp { template <class T> KILN_HOST_DEVICE auto operator()(T x, T y) const { return x * y; } };
struct Div : FloatingOp { template <class T> KILN_HOST_DEVICE T operator()(T x, T y) const { return x / y; } };
// Integers: exact power by squaring, as PyTorch's integral pow (a negative exponent gives 1 for
// base 1, +-1 for base -1, else 0; overflow wraps). Not through double pow and a truncating cast:
// on an H100 that gave 2 where 3 was due (CUDA's pow is not exact at integers).
template <class T> KILN_HOST_DEVICE T integer_pow(T x, T y) {
  if constexpr (std::is_signed_v<T>) {
    if (y < 0) return x == 1 ? T(1) : x == -1 ? ((y & 1) ? T(-1) : T(1)) : T(0);
  }
  using U = std::make_unsigned_t<T>;  // unsigned arithmetic wraps where signed would be undefined
  U result = 1, base = static_cast<U>(x);
  for (U e = static_cast<U>(y); e != 0; e >>= 1) {
    if (e & 1) result = static_cast<U>(result * base);
    base = static_cast<U>(base * base);
  }
  return static_cast<T>(result);
}
template <class Math> struct Pow : NumericOp {
  template <class T> KILN_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_floating_point_v<T>) return Math::pow(x, y);
    else return integer_pow(x, y);
  }
};
// NaN propagates from either side (x != x is false for integers).
struct Maximum : NumericOp {
  template <class T> KILN_HOST_DEVICE T operator()(T x, T y) const { return (x > y || x != x) ? x : y; }
};
struct Minimum : NumericOp {
  template <class T> KILN_HOST_DEVICE T operator()(T x, T y) const { return (x < y || x != x) ? x : y; }
};
// grad * gelu'(x), taking (grad, x).
template <class Math> struct GeluTanhBackward : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T g, T x) const { return gelu_tanh_backward<Math>(g, x); }
};
template <class Math> struct GeluErfBackward : FloatingOp {
  template <class T> KILN_HOST_DEVICE T operator()(T g, T x) const { return gelu_erf_backward<Math>(g, x); }
};
// x + alpha * y with alpha in the compute type A (not rounded to the dtype first): add_ with alpha.
template <class A> struct AddScaled {
  A alpha;
  KILN_HOST_DEVICE A operator()(A x, A y) const { return A(x + alpha * y); }
};

// --- comparisons ---------------------------------------------------------------------------
struct Eq : NumericOp { template <class T> KILN_HOST_DEVICE bool operator()(T x, T y) const { return x == y; } };
struct Ne : NumericOp { template <class T> KILN_HOST_DEVICE bool operator()(T x, T y) const { return x != y; } };
struct Lt : NumericOp { template <class T> KILN_HOST_DEVICE bool operator()(T x, T y) const { return x < y; } };
struct Le : NumericOp { template <class T> KILN_HOST_DEVICE bool operator()(T x, T y) const { return x <= y; } };
struct Gt : NumericOp { template <class T> KILN_HOST_DEVICE bool operator()(T x, T y) const { return x > y; } };
struct Ge : NumericOp { template <class T> KILN_HOST_DEVICE bool operator()(T x, T y) const { return x >= y; } };

// A shape viewed as (outer, n, inner) around dim: the product of the dims before it, its size and
// the product of the dims after it (softmax's rows and columns on both backends).
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline DimSplit split_at(const Shape& shape, int64_t dim) {
  DimSplit l;
  for (int64_t k = 0; k < shape.ndim(); ++k) (k < dim ? l.outer : k == dim ? l.n : l.inner) *= shape[k];
  return l;
}

// Note [Collapsing dims]
// The strided loops of both backends (core/cpu/loops.h, core/cuda/plan/offset_calc.h) walk N
// operands of one logical shape. Size-1 dims are dropped, then dim d is merged into d+1 wherever
// every operand is laid out contiguously across the pair (stride[d] == stride[d+1] * size[d+1]),
// so contiguous and broadcast operands reach the loop as few, long dims. Strides are in any unit
// (bytes on the CPU, elements on CUDA). An empty result means one element (or a 0 dim was kept).
template <int N>
void collapse_dims(const Shape& shape, const std::array<Strides, N>& strides, Shape& out_shape,
                   std::array<Strides, N>& out_strides) {
  Shape sh;
  std::array<Strides, N> st;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    if (shape[d] == 1) continue;
    sh.push_back(shape[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  for (int64_t d = sh.ndim() - 2; d >= 0; --d) {
    bool merge = true;
    for (int k = 0; k < N; ++k) merge = merge && st[k][d] == st[k][d + 1] * sh[d + 1];
    if (!merge) continue;
    sh[d] *= sh[d + 1];
    sh.erase(sh.begin() + d + 1);
    for (int k = 0; k < N; ++k) {
      st[k][d] = st[k][d + 1];
      st[k].erase(st[k].begin() + d + 1);
    }
  }
  out_shape = std::move(sh);
  out_strides = std::move(st);
}

}  // namespace kiln::formulas
