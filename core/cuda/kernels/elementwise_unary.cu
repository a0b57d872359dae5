// CUDA unary elementwise ops (neg, abs, ..., gelu, square) over any strides, through the engine in
// core/cuda/loops.cuh. The front (core/ops/elementwise.cpp) has already cast integer inputs of the
// float functions to f32.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

namespace {

template <class Op>
void numeric(const char* name, const Tensor& out, const Tensor& x, Op op) {
  dispatch_numeric_device(x.dtype(), name, [&]<class T>() { launch_map<T, T>(out, {&x}, op); });
}

template <class Op>
void floating(const char* name, const Tensor& out, const Tensor& x, Op op) {
  dispatch_floating_device(x.dtype(), name, [&]<class T>() { launch_map<T, T>(out, {&x}, op); });
}

}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  const char* name = op_name(op);
  KILN_CHECK(out.dtype() == x.dtype(), name, ": output dtype ", out.dtype(), " differs from the input's ", x.dtype());
  switch (op) {
    case UnaryOp::neg: return numeric(name, out, x, fn::Neg{});
    case UnaryOp::abs: return numeric(name, out, x, fn::Abs{});
    case UnaryOp::relu: return numeric(name, out, x, fn::Relu{});
    case UnaryOp::square: return numeric(name, out, x, fn::Square{});
    case UnaryOp::exp: return floating(name, out, x, fn::Exp{});
    case UnaryOp::log: return floating(name, out, x, fn::Log{});
    case UnaryOp::sqrt: return floating(name, out, x, fn::Sqrt{});
    case UnaryOp::rsqrt: return floating(name, out, x, fn::Rsqrt{});
    case UnaryOp::tanh: return floating(name, out, x, fn::Tanh{});
    case UnaryOp::sigmoid: return floating(name, out, x, fn::Sigmoid{});
    case UnaryOp::gelu_tanh: return floating(name, out, x, fn::GeluTanh{});
    case UnaryOp::gelu_erf: return floating(name, out, x, fn::GeluErf{});
  }
  KILN_UNREACHABLE("unary: unknown op ", static_cast<int>(op));
}

}  // namespace kiln::cuda
