// The elementwise kernels on the CPU: each op's functor (core/formulas.h, Note [Elementwise
// functors]), shared with the CUDA kernels, mapped over its operands by cpu::map_kernel
// (core/cpu/loops.h) on compute types (acc_t: float for the 16-bit floats).
#include <kiln/core/cpu/elementwise.h>

#include <kiln/core/cpu/loops.h>
#include <kiln/core/cpu/vec_math.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/formulas.h>
#include <kiln/core/ops/elementwise_table.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

void unary(const char* name, UnaryOp op, const Tensor& out, const Tensor& x) {
  ops::with_unary<VecMath>(op, [&]<class F>(F f) {
    ops::dispatch_op<F>(x.dtype(), name, [&]<class T>() { map_kernel<T, T>(out, {&x}, f); });
  });
}

void binary(const char* name, BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ops::with_binary<VecMath>(op, [&]<class F>(F f) {
    ops::dispatch_op<F>(a.dtype(), name, [&]<class T>() { map_kernel<T, T, T>(out, {&a, &b}, f); });
  });
}

void compare(const char* name, CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ops::with_compare(op, [&]<class F>(F f) {
    ops::dispatch_op<F>(a.dtype(), name, [&]<class T>() { map_kernel<bool, T, T>(out, {&a, &b}, f); });
  });
}

void add_scaled(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  dispatch_numeric(a.dtype(), name, [&]<class T>() {
    map_kernel<T, T, T>(out, {&a, &b}, formulas::AddScaled<acc_t<T>>{static_cast<acc_t<T>>(alpha)});
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), "where", [&]<class T>() {
    map_kernel<T, bool, T, T>(out, {&cond, &a, &b}, [](bool k, auto x, auto y) { return k ? x : y; });
  });
}

void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
  dispatch_all(x.dtype(), "masked_fill", [&]<class T>() {
    const acc_t<T> v = static_cast<acc_t<T>>(value);
    map_kernel<T, T, bool>(out, {&x, &mask}, [v](auto xv, bool k) { return k ? v : xv; });
  });
}

}  // namespace kiln::cpu::KILN_CPU_CAP
