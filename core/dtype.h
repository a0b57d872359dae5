// Element types. DType is the runtime tag; CppType<DType> / dtype_of<T> map between the tag and
// the C++ type that stores it. b8 is bool (named "bool" when printed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include <kiln/core/half.h>

namespace kiln {

/// A tensor's element type; b8 is bool (printed "bool").
enum class DType : uint8_t { f32, f64, bf16, f16, i64, i32, u8, b8 };
inline constexpr int kDTypeCount = 8;  ///< the number of DTypes

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::u8: case DType::b8: return 1;
  }
  return 0;
}

/// "f32", "f64", "bf16", "f16", "i64", "i32", "u8", "bool".
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::b8: return "bool";
  }
  return "?";
}

/// f32, f64, bf16 or f16.
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}
/// i64, i32 or u8 (not bool).
constexpr bool is_integral(DType t) { return t == DType::i64 || t == DType::i32 || t == DType::u8; }

/// The dtype two operands are computed in (torch's promotion lattice for these types):
/// bool < u8 < i32 < i64 < {f16, bf16} < f32 < f64; f16 with bf16 gives f32.
DType promote_types(DType a, DType b);

/// Prints dtype_name(t).
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

/// The C++ type of a DType's elements (CppType<DType::f32> is float), and the DType of a C++ type
/// (dtype_of<float> is DType::f32).
template <DType D> struct CppTypeOf;
template <> struct CppTypeOf<DType::f32> { using type = float; };
template <> struct CppTypeOf<DType::f64> { using type = double; };
template <> struct CppTypeOf<DType::bf16> { using type = BFloat16; };
template <> struct CppTypeOf<DType::f16> { using type = Half; };
template <> struct CppTypeOf<DType::i64> { using type = int64_t; };
template <> struct CppTypeOf<DType::i32> { using type = int32_t; };
template <> struct CppTypeOf<DType::u8> { using type = uint8_t; };
template <> struct CppTypeOf<DType::b8> { using type = bool; };
template <DType D> using CppType = typename CppTypeOf<D>::type;

template <class T> inline constexpr DType dtype_of = DType::f32;
template <> inline constexpr DType dtype_of<double> = DType::f64;
template <> inline constexpr DType dtype_of<BFloat16> = DType::bf16;
template <> inline constexpr DType dtype_of<Half> = DType::f16;
template <> inline constexpr DType dtype_of<int64_t> = DType::i64;
template <> inline constexpr DType dtype_of<int32_t> = DType::i32;
template <> inline constexpr DType dtype_of<uint8_t> = DType::u8;
template <> inline constexpr DType dtype_of<bool> = DType::b8;

/// The type kernels compute in: float for the 16-bit floats, the type itself otherwise.
template <class T> struct AccOf { using type = T; };
template <> struct AccOf<BFloat16> { using type = float; };
template <> struct AccOf<Half> { using type = float; };
template <class T> using acc_t = typename AccOf<T>::type;

}  // namespace kiln
