// The names of the elementwise ops (core/ops/elementwise_op.h), from the same lists as the enums.
#include <kiln/core/ops/elementwise_op.h>

#include <cstddef>

namespace kiln::ops {

namespace {

#define KILN_OP_NAME(name) #name,
constexpr const char* kUnaryNames[] = {KILN_UNARY_OPS(KILN_OP_NAME)};
constexpr const char* kBinaryNames[] = {KILN_BINARY_OPS(KILN_OP_NAME)};
constexpr const char* kCompareNames[] = {KILN_COMPARE_OPS(KILN_OP_NAME)};
#undef KILN_OP_NAME

template <class Op, size_t N>
const char* name_in(const char* const (&names)[N], Op op) {
  const auto i = static_cast<size_t>(op);
  return i < N ? names[i] : "?";
}

}  // namespace

const char* op_name(UnaryOp op) { return name_in(kUnaryNames, op); }
const char* op_name(BinaryOp op) { return name_in(kBinaryNames, op); }
const char* op_name(CompareOp op) { return name_in(kCompareNames, op); }

}  // namespace kiln::ops
