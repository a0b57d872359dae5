// Type promotion for binary ops.
#include <kiln/core/dtype.h>

namespace kiln {

static int promotion_rank(DType t) {
  switch (t) {
    case DType::b8: return 0;
    case DType::u8: return 1;
    case DType::i32: return 2;
    case DType::i64: return 3;
    case DType::f16: case DType::bf16: return 4;
    case DType::f32: return 5;
    case DType::f64: return 6;
  }
  return 0;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

}  // namespace kiln

#include <kiln/core/dispatch.h>

namespace kiln::detail {
void throw_unsupported_dtype(const char* op, DType t, const char* accepted) {
  throw ValueError(str_cat(op, ": unsupported dtype ", dtype_name(t), " (accepted: ", accepted, ")"));
}
}  // namespace kiln::detail
