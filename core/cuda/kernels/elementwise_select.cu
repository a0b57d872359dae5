// CUDA where(cond, a, b) and masked_fill(x, mask, value) for every dtype, through the engine in
// core/cuda/loops.cuh. The front broadcasts the operands and promotes a and b to one dtype.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

namespace {

struct Where {
  template <class T> __device__ T operator()(bool k, T x, T y) const { return k ? x : y; }
};

template <class A>
struct MaskedFill {
  A value;
  __device__ A operator()(A x, bool k) const { return k ? value : x; }
};

}  // namespace

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  KILN_CHECK(cond.dtype() == DType::b8, "where: condition must be bool, got ", cond.dtype());
  KILN_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), "where: expected one dtype, got ", a.dtype(), " and ",
             b.dtype(), " into ", out.dtype());
  dispatch_all_device(a.dtype(), "where", [&]<class T>() { launch_map<T, bool, T, T>(out, {&cond, &a, &b}, Where{}); });
}

void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
  KILN_CHECK(mask.dtype() == DType::b8, "masked_fill: mask must be bool, got ", mask.dtype());
  KILN_CHECK(out.dtype() == x.dtype(), "masked_fill: output dtype ", out.dtype(), " differs from the input's ",
             x.dtype());
  dispatch_all(x.dtype(), "masked_fill", [&]<class T>() {
    using D = device_t<T>;
    // value converted to the compute type, then rounded to T by the store (as on the CPU).
    const MaskedFill<dacc_t<D>> op{static_cast<dacc_t<D>>(static_cast<acc_t<T>>(value))};
    launch_map<D, D, bool>(out, {&x, &mask}, op);
  });
}

}  // namespace kiln::cuda
