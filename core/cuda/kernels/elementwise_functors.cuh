// Device functors of the elementwise ops, taking and returning compute types (dacc_t: float for
// the 16-bit floats). Each uses the formula of the CPU kernels (core/cpu/elementwise.cpp; the GELUs
// from core/formulas.h, shared with them) with
// CUDA's accurate libm (expf, tanhf, erff: no fast-math intrinsics), so f32 agrees with the CPU
// to a few ulp. Integer results wrap as the CPU's casts do. CUDA-only header.
#pragma once

#include <cmath>
#include <type_traits>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/formulas.h>

namespace kiln::cuda::fn {

// float -> the f suffixed libm function, double -> the plain one (global names: kiln has pow too).
template <class T>
__device__ __forceinline__ T exp_(T v) {
  if constexpr (std::is_same_v<T, float>) return ::expf(v); else return ::exp(v);
}
template <class T>
__device__ __forceinline__ T log_(T v) {
  if constexpr (std::is_same_v<T, float>) return ::logf(v); else return ::log(v);
}
template <class T>
__device__ __forceinline__ T sqrt_(T v) {
  if constexpr (std::is_same_v<T, float>) return ::sqrtf(v); else return ::sqrt(v);
}
template <class T>
__device__ __forceinline__ T tanh_(T v) {
  if constexpr (std::is_same_v<T, float>) return ::tanhf(v); else return ::tanh(v);
}
template <class T>
__device__ __forceinline__ T erf_(T v) {
  if constexpr (std::is_same_v<T, float>) return ::erff(v); else return ::erf(v);
}

// The device's math for the shared formulas of core/formulas.h.
struct DeviceMath {
  template <class T> __device__ static T exp(T v) { return exp_(v); }
  template <class T> __device__ static T tanh(T v) { return tanh_(v); }
  template <class T> __device__ static T erf(T v) { return erf_(v); }
};

// --- unary ---------------------------------------------------------------------------------
struct Neg { template <class T> __device__ T operator()(T v) const { return T(-v); } };
struct Abs {
  template <class T> __device__ T operator()(T v) const {
    if constexpr (std::is_unsigned_v<T>) return v; else return v < T(0) ? T(-v) : v;
  }
};
struct Relu {
  template <class T> __device__ T operator()(T v) const {
    if constexpr (std::is_unsigned_v<T>) return v; else return v < T(0) ? T(0) : v;
  }
};
struct Square { template <class T> __device__ T operator()(T v) const { return T(v * v); } };
struct Exp { template <class T> __device__ T operator()(T v) const { return exp_(v); } };
struct Log { template <class T> __device__ T operator()(T v) const { return log_(v); } };
struct Sqrt { template <class T> __device__ T operator()(T v) const { return sqrt_(v); } };
// 1 / sqrt rather than rsqrtf (2 ulp): both roundings correct, as on the CPU.
struct Rsqrt { template <class T> __device__ T operator()(T v) const { return T(1) / sqrt_(v); } };
struct Tanh { template <class T> __device__ T operator()(T v) const { return tanh_(v); } };
struct Sigmoid { template <class T> __device__ T operator()(T v) const { return T(1) / (T(1) + exp_(-v)); } };
// GELU, tanh approximation and exact (core/formulas.h).
struct GeluTanh { template <class T> __device__ T operator()(T v) const { return formulas::gelu_tanh<DeviceMath>(v); } };
struct GeluErf { template <class T> __device__ T operator()(T v) const { return formulas::gelu_erf<DeviceMath>(v); } };

// --- binary --------------------------------------------------------------------------------
// Integer operands promote to int in + - *; the store casts back (wrapping u8), as on the CPU.
struct Add { template <class T> __device__ auto operator()(T x, T y) const { return x + y; } };
struct Sub { template <class T> __device__ auto operator()(T x, T y) const { return x - y; } };
struct Rsub { template <class T> __device__ auto operator()(T x, T y) const { return y - x; } };
struct Mul { template <class T> __device__ auto operator()(T x, T y) const { return x * y; } };
struct Div { template <class T> __device__ T operator()(T x, T y) const { return x / y; } };
// Integers go through double pow, as std::pow(int, int) does.
struct Pow {
  template <class T> __device__ T operator()(T x, T y) const {
    if constexpr (std::is_same_v<T, float>) return ::powf(x, y);
    else if constexpr (std::is_same_v<T, double>) return ::pow(x, y);
    else return static_cast<T>(::pow(static_cast<double>(x), static_cast<double>(y)));
  }
};
// NaN propagates from either side (x != x is false for integers).
struct Maximum { template <class T> __device__ T operator()(T x, T y) const { return (x > y || x != x) ? x : y; } };
struct Minimum { template <class T> __device__ T operator()(T x, T y) const { return (x < y || x != x) ? x : y; } };

// grad * gelu'(x), taking (grad, x) (core/formulas.h).
struct GeluTanhBackward {
  template <class T> __device__ T operator()(T g, T x) const { return formulas::gelu_tanh_backward<DeviceMath>(g, x); }
};
struct GeluErfBackward {
  template <class T> __device__ T operator()(T g, T x) const { return formulas::gelu_erf_backward<DeviceMath>(g, x); }
};

// --- comparisons ---------------------------------------------------------------------------
struct Eq { template <class T> __device__ bool operator()(T x, T y) const { return x == y; } };
struct Ne { template <class T> __device__ bool operator()(T x, T y) const { return x != y; } };
struct Lt { template <class T> __device__ bool operator()(T x, T y) const { return x < y; } };
struct Le { template <class T> __device__ bool operator()(T x, T y) const { return x <= y; } };
struct Gt { template <class T> __device__ bool operator()(T x, T y) const { return x > y; } };
struct Ge { template <class T> __device__ bool operator()(T x, T y) const { return x >= y; } };

// op(x, s) with s a kernel argument (tensor-scalar ops need no device copy of the scalar).
template <class Op, class A>
struct WithScalar {
  Op op;
  A s;
  __device__ auto operator()(A x) const { return op(x, s); }
};

}  // namespace kiln::cuda::fn
