// The elementwise ops' enums (core/ops/elementwise_op.h) mapped to their functors (core/formulas.h,
// Note [Elementwise functors]), once for both backends: each backend's kernels are
//   with_unary<Math>(op, [&]<class F>(F f) { dispatch_op<F>(dtype, name, [&]<class T>() { map f }); });
// so a new op is a new enumerator, a functor and a case here. Included by core/cpu/elementwise.cpp
// and core/cuda/kernels/elementwise_*.cu only.
#pragma once

#include <kiln/core/dispatch.h>
#include <kiln/core/error.h>
#include <kiln/core/formulas.h>
#include <kiln/core/ops/elementwise_op.h>

namespace kiln::ops {

// body(F{}) for the functor of op; Math is the backend's (VecMath, DeviceMath).
template <class Math, class Body>
void with_unary(UnaryOp op, Body&& body) {
  namespace f = formulas;
  switch (op) {
    case UnaryOp::neg: return body(f::Neg{});
    case UnaryOp::abs: return body(f::Abs{});
    case UnaryOp::relu: return body(f::Relu{});
    case UnaryOp::square: return body(f::Square{});
    case UnaryOp::exp: return body(f::Exp<Math>{});
    case UnaryOp::log: return body(f::Log<Math>{});
    case UnaryOp::sqrt: return body(f::Sqrt<Math>{});
    case UnaryOp::rsqrt: return body(f::Rsqrt<Math>{});
    case UnaryOp::tanh: return body(f::Tanh<Math>{});
    case UnaryOp::sin: return body(f::Sin<Math>{});
    case UnaryOp::cos: return body(f::Cos<Math>{});
    case UnaryOp::sigmoid: return body(f::Sigmoid<Math>{});
    case UnaryOp::gelu_tanh: return body(f::GeluTanh<Math>{});
    case UnaryOp::gelu_erf: return body(f::GeluErf<Math>{});
  }
  KILN_UNREACHABLE("unary: unknown op ", static_cast<int>(op));
}

template <class Math, class Body>
void with_binary(BinaryOp op, Body&& body) {
  namespace f = formulas;
  switch (op) {
    case BinaryOp::add: return body(f::Add{});
    case BinaryOp::sub: return body(f::Sub{});
    case BinaryOp::rsub: return body(f::Rsub{});
    case BinaryOp::mul: return body(f::Mul{});
    case BinaryOp::div: return body(f::Div{});
    case BinaryOp::pow: return body(f::Pow<Math>{});
    case BinaryOp::maximum: return body(f::Maximum{});
    case BinaryOp::minimum: return body(f::Minimum{});
    case BinaryOp::gelu_tanh_backward: return body(f::GeluTanhBackward<Math>{});
    case BinaryOp::gelu_erf_backward: return body(f::GeluErfBackward<Math>{});
  }
  KILN_UNREACHABLE("binary: unknown op ", static_cast<int>(op));
}

template <class Body>
void with_compare(CompareOp op, Body&& body) {
  namespace f = formulas;
  switch (op) {
    case CompareOp::eq: return body(f::Eq{});
    case CompareOp::ne: return body(f::Ne{});
    case CompareOp::lt: return body(f::Lt{});
    case CompareOp::le: return body(f::Le{});
    case CompareOp::gt: return body(f::Gt{});
    case CompareOp::ge: return body(f::Ge{});
  }
  KILN_UNREACHABLE("compare: unknown op ", static_cast<int>(op));
}

// fn<T>() for the dtype t, among the dtypes functor F runs on (F::kFloating: floating only).
template <class F, class Fn>
void dispatch_op(DType t, const char* name, Fn&& fn) {
  if constexpr (F::kFloating) dispatch_floating(t, name, fn);
  else dispatch_numeric(t, name, fn);
}

}  // namespace kiln::ops
