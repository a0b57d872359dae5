// CUDA binary elementwise ops on two tensors (add ... minimum, the GELU backwards) and add_ with
// alpha, through the engine in core/cuda/loops.cuh. Operands arrive broadcast and in one dtype.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

namespace {

template <class Op>
void numeric(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  dispatch_numeric_device(a.dtype(), name, [&]<class T>() { launch_map<T, T, T>(out, {&a, &b}, op); });
}

template <class Op>
void floating(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  dispatch_floating_device(a.dtype(), name, [&]<class T>() { launch_map<T, T, T>(out, {&a, &b}, op); });
}

void check_dtypes(const char* name, const Tensor& out, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), name, ": expected one dtype, got ", a.dtype(),
             " and ", b.dtype(), " into ", out.dtype());
}

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_dtypes(name, out, a, b);
  switch (op) {
    case BinaryOp::add: return numeric(name, out, a, b, fn::Add{});
    case BinaryOp::sub: return numeric(name, out, a, b, fn::Sub{});
    case BinaryOp::mul: return numeric(name, out, a, b, fn::Mul{});
    case BinaryOp::pow: return numeric(name, out, a, b, fn::Pow{});
    case BinaryOp::maximum: return numeric(name, out, a, b, fn::Maximum{});
    case BinaryOp::minimum: return numeric(name, out, a, b, fn::Minimum{});
    case BinaryOp::div: return floating(name, out, a, b, fn::Div{});
    case BinaryOp::gelu_tanh_backward: return floating(name, out, a, b, fn::GeluTanhBackward{});
    case BinaryOp::gelu_erf_backward: return floating(name, out, a, b, fn::GeluErfBackward{});
    case BinaryOp::rsub: break;
  }
  KILN_UNREACHABLE("binary: ", name, " has no tensor-tensor kernel");
}

namespace {
// a + alpha * b with alpha in the compute type (not rounded to T first), as the CPU's add_.
template <class A>
struct AddScaled {
  A alpha;
  __device__ A operator()(A x, A y) const { return A(x + alpha * y); }
};
}  // namespace

void add_scaled(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  check_dtypes("add_", out, a, b);
  dispatch_numeric(a.dtype(), "add_", [&]<class T>() {
    using D = device_t<T>;
    const AddScaled<dacc_t<D>> op{static_cast<dacc_t<D>>(static_cast<acc_t<T>>(alpha))};
    launch_map<D, D, D>(out, {&a, &b}, op);
  });
}

}  // namespace kiln::cuda
