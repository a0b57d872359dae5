// Differentiable dropout. The keep mask comes from counter-based Philox draws: element i is kept
// iff philox_uniform(seed, first + i) >= p, where `first` is reserved with gen.advance(numel), so
// a generator with the same seed and offset gives the same mask on any thread count, and on a
// CUDA device (where cuda::dropout_mask makes it with the same draws).
#include <kiln/autograd/ops/dropout.h>

#include <cmath>

#include <kiln/autograd/function.h>
#include <kiln/core/cuda/kernels/random.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/parallel.h>

namespace kiln {

namespace {

// (x's shape) 0 or `scale` per element, f64 for f64 inputs and f32 otherwise.
template <class T>
Tensor make_mask(const Shape& shape, double p, double scale, uint64_t seed, uint64_t first) {
  Tensor mask = empty(shape, dtype_of<T>);
  T* m = mask.data<T>();
  const T keep = static_cast<T>(scale);
  parallel_for(0, mask.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      m[i] = philox_uniform(seed, first + static_cast<uint64_t>(i)) >= p ? keep : T(0);
  });
  return mask;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_defined(x, "dropout");
  KILN_CHECK_VALUE(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, got p = ", p);
  KILN_CHECK_VALUE(is_floating(x.dtype()), "dropout: expected a floating input, got ", x.dtype());
  if (!training || p == 0.0) return x;
  const uint64_t first = gen.advance(static_cast<uint64_t>(x.numel()));
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  const DType mask_dtype = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor mask;
  if constexpr (cuda::kBuilt)
    if (x.device().is_cuda()) mask = cuda::dropout_mask(x.shape(), mask_dtype, p, scale, gen.seed(), first, x.device());
  if (!mask.defined()) {
    mask = mask_dtype == DType::f64 ? make_mask<double>(x.shape(), p, scale, gen.seed(), first)
                                    : make_mask<float>(x.shape(), p, scale, gen.seed(), first);
    mask = mask.to(x.device());
  }
  Tensor out = ops::mul(autograd::saved(x), mask).to(x.dtype());
  // grad_in = g * mask, with the mask holding 0 or 1/(1-p).
  return autograd::record(out, "DropoutBackward", {&x}, [&](const autograd::Needs&) {
    return [mask](const Tensor& g) { return ops::mul(g, mask); };
  });
}

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, default_generator()); }

}  // namespace kiln
