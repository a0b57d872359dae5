// Runtime dtype -> compile-time type. Kernels are C++20 template lambdas:
//   dispatch_floating(t.dtype(), "exp", [&]<class T>() { ... });
// An unsupported dtype fails with one error naming the op, the dtype and what it accepts.
#pragma once

#include <kiln/core/dtype.h>
#include <kiln/core/error.h>

namespace kiln {

namespace detail {
[[noreturn]] void throw_unsupported_dtype(const char* op, DType t, const char* accepted);
}

#define KILN_DISPATCH_CASE(D) \
  case DType::D:              \
    return fn.template operator()<CppType<DType::D>>();

template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& fn) {
  switch (t) {
    KILN_DISPATCH_CASE(f32) KILN_DISPATCH_CASE(f64) KILN_DISPATCH_CASE(bf16) KILN_DISPATCH_CASE(f16)
    default: detail::throw_unsupported_dtype(op, t, "f32, f64, bf16, f16");
  }
}

// Numeric: floating types and integers (no bool).
template <class F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& fn) {
  switch (t) {
    KILN_DISPATCH_CASE(f32) KILN_DISPATCH_CASE(f64) KILN_DISPATCH_CASE(bf16) KILN_DISPATCH_CASE(f16)
    KILN_DISPATCH_CASE(i64) KILN_DISPATCH_CASE(i32) KILN_DISPATCH_CASE(u8)
    default: detail::throw_unsupported_dtype(op, t, "f32, f64, bf16, f16, i64, i32, u8");
  }
}

template <class F>
decltype(auto) dispatch_all(DType t, const char* op, F&& fn) {
  switch (t) {
    KILN_DISPATCH_CASE(f32) KILN_DISPATCH_CASE(f64) KILN_DISPATCH_CASE(bf16) KILN_DISPATCH_CASE(f16)
    KILN_DISPATCH_CASE(i64) KILN_DISPATCH_CASE(i32) KILN_DISPATCH_CASE(u8) KILN_DISPATCH_CASE(b8)
  }
  detail::throw_unsupported_dtype(op, t, "any");
}

// Index tensors: i64 or i32.
template <class F>
decltype(auto) dispatch_index(DType t, const char* op, F&& fn) {
  switch (t) {
    KILN_DISPATCH_CASE(i64) KILN_DISPATCH_CASE(i32)
    default: detail::throw_unsupported_dtype(op, t, "i64, i32 (an index tensor)");
  }
}

#undef KILN_DISPATCH_CASE

// A runtime flag -> a compile-time one: dispatch_bool(log, [&]<bool Log>() { ... }).
template <class F>
decltype(auto) dispatch_bool(bool b, F&& fn) {
  return b ? fn.template operator()<true>() : fn.template operator()<false>();
}

}  // namespace kiln
