// The names of the elementwise ops (core/ops/elementwise_op.h).
#include <kiln/core/ops/elementwise_op.h>

namespace kiln::ops {

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::abs: return "abs";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu_tanh: return "gelu_tanh";
    case UnaryOp::gelu_erf: return "gelu_erf";
    case UnaryOp::square: return "square";
  }
  return "?";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::rsub: return "rsub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::gelu_tanh_backward: return "gelu_tanh_backward";
    case BinaryOp::gelu_erf_backward: return "gelu_erf_backward";
  }
  return "?";
}

const char* op_name(CompareOp op) {
  switch (op) {
    case CompareOp::eq: return "eq";
    case CompareOp::ne: return "ne";
    case CompareOp::lt: return "lt";
    case CompareOp::le: return "le";
    case CompareOp::gt: return "gt";
    case CompareOp::ge: return "ge";
  }
  return "?";
}

}  // namespace kiln::ops
