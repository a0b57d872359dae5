// Factories. Random fills go through Philox by element index, so they are reproducible for any
// thread count, and CUDA tensors get the same values from the same draws (core/cuda/kernels/random.h).
#include <kiln/core/factory.h>

#include <cmath>
#include <cstring>

#include <kiln/core/cuda/kernels/fill.h>
#include <kiln/core/cuda/kernels/random.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln {

Tensor empty(const Shape& shape, TensorOptions o) {
  if (!o.pinned_memory_) return empty(shape, o.dtype_, o.device_);
  KILN_CHECK_VALUE(o.device_.is_cpu(), "empty: pinned memory is host memory, but the device is ", o.device_);
  for (int64_t d : shape) KILN_CHECK_VALUE(d >= 0, "empty: negative dimension in shape ", shape);
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(o.dtype_);
  return make_tensor(Storage::allocate_pinned(nbytes), o.dtype_, shape, contiguous_strides(shape));
}
Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }
Tensor full(const Shape& shape, double value, TensorOptions o) {
  Tensor t = empty(shape, o);
  t.fill_(value);
  return t;
}
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

Tensor arange(double end, TensorOptions o) { return arange(0.0, end, 1.0, o); }

Tensor arange(double start, double end, double step, TensorOptions o) {
  KILN_CHECK_VALUE(step != 0.0, "arange: step must be non-zero");
  KILN_CHECK_VALUE(std::isfinite(start) && std::isfinite(end), "arange: start ", start, " and end ", end,
                   " must be finite");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  if constexpr (cuda::kBuilt)
    if (o.device_.is_cuda()) {
      Tensor t = empty({n}, o.dtype_, o.device_);
      cuda::arange(t, start, step);
      return t;
    }
  Tensor t = empty({n}, o);
  dispatch_numeric(o.dtype_, "arange", [&]<class T>() {
    T* p = t.data<T>();
    // fma, as the CUDA kernel computes it (a compiler could fuse a plain a*b+c or not).
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<acc_t<T>>(std::fma(double(i), step, start)));
  });
  return t.to(o.device_);
}

// Fills a fresh CPU tensor element by element from a per-index draw, then moves it to the device.
template <class Draw>
static Tensor random_fill(const Shape& shape, TensorOptions o, const char* op, Draw draw) {
  Tensor t = empty(shape, TensorOptions(o).device(Device::cpu()));
  int64_t n = t.numel();
  dispatch_numeric(o.dtype_, op, [&]<class T>() {
    T* p = t.data<T>();
    parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(static_cast<acc_t<T>>(draw(i)));
    });
  });
  return t.to(o.device_);
}

// rand and randn: Philox draws (uniform in [0, 1) or standard normal) of a floating dtype, made
// on the device for a CUDA tensor (cuda::random_fill: the CPU's draws).
static Tensor random_floating(const char* op, cuda::RandomDraw draw, const Shape& shape, Generator& gen,
                              TensorOptions o) {
  KILN_CHECK_VALUE(is_floating(o.dtype_), op, ": expected a floating dtype, got ", o.dtype_);
  uint64_t seed = gen.seed(), first = gen.advance(shape_numel(shape));
  if constexpr (cuda::kBuilt)
    if (o.device_.is_cuda()) {
      Tensor t = empty(shape, o.dtype_, o.device_);
      cuda::random_fill(t, draw, 0.0, 1.0, seed, first);
      return t;
    }
  if (draw == cuda::RandomDraw::normal)
    return random_fill(shape, o, op, [=](int64_t i) { return philox_normal(seed, first + i); });
  return random_fill(shape, o, op, [=](int64_t i) { return philox_uniform(seed, first + i); });
}

Tensor rand(const Shape& shape, Generator& gen, TensorOptions o) {
  return random_floating("rand", cuda::RandomDraw::uniform, shape, gen, o);
}
Tensor rand(const Shape& shape, TensorOptions o) { return rand(shape, default_generator(), o); }
Tensor randn(const Shape& shape, Generator& gen, TensorOptions o) {
  return random_floating("randn", cuda::RandomDraw::normal, shape, gen, o);
}
Tensor randn(const Shape& shape, TensorOptions o) { return randn(shape, default_generator(), o); }

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions o) {
  KILN_CHECK_VALUE(high > low, "randint: empty range [", low, ", ", high, ")");
  uint64_t seed = gen.seed(), first = gen.advance(shape_numel(shape));
  if constexpr (cuda::kBuilt)
    if (o.device_.is_cuda()) {
      Tensor t = empty(shape, o.dtype_, o.device_);
      cuda::random_int(t, low, high, seed, first);
      return t;
    }
  double span = double(high - low);
  return random_fill(shape, o, "randint", [=](int64_t i) {
    return double(low + std::min<int64_t>(int64_t(philox_uniform(seed, first + i) * span), high - low - 1));
  });
}

// t = fma(b, draw, a) per element, in double, then converted to t's dtype; the draws come from
// `first`, which the caller reserved for t.numel() elements.
static void affine_random_(Tensor& t, cuda::RandomDraw draw, double a, double b, uint64_t seed, uint64_t first) {
  if constexpr (cuda::kBuilt)
    if (t.device().is_cuda()) {
      Tensor out = t.is_contiguous() ? t : empty(t.shape(), t.dtype(), t.device());
      cuda::random_fill(out, draw, a, b, seed, first);
      if (!out.is_same(t)) t.copy_(out);
      return;
    }
  Tensor r = empty(t.shape(), DType::f64, Device::cpu());
  double* p = r.data<double>();
  const bool uniform = draw == cuda::RandomDraw::uniform_affine;
  parallel_for(0, r.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t index = first + static_cast<uint64_t>(i);
      p[i] = std::fma(b, uniform ? philox_uniform(seed, index) : philox_normal(seed, index), a);
    }
  });
  t.copy_(r);
}

Tensor& uniform_(Tensor& t, double low, double high, Generator& gen) {
  check_defined(t, "uniform_");
  ops::check_in_storage(t, "uniform_", "tensor");
  KILN_CHECK_VALUE(is_floating(t.dtype()), "uniform_: expected a floating tensor, got ", t.dtype());
  uint64_t seed = gen.seed(), first = gen.advance(t.numel());
  affine_random_(t, cuda::RandomDraw::uniform_affine, low, high - low, seed, first);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  check_defined(t, "normal_");
  ops::check_in_storage(t, "normal_", "tensor");
  KILN_CHECK_VALUE(is_floating(t.dtype()), "normal_: expected a floating tensor, got ", t.dtype());
  uint64_t seed = gen.seed(), first = gen.advance(t.numel());
  affine_random_(t, cuda::RandomDraw::normal_affine, mean, std, seed, first);
  return t;
}

template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, Device device) {
  KILN_CHECK_VALUE(static_cast<int64_t>(data.size()) == shape_numel(shape), "from_vector: ", data.size(),
                   " values do not fill shape ", shape, " (", shape_numel(shape), " elements)");
  Tensor t = empty(shape, dtype_of<T>, Device::cpu());
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = t.data<bool>();
    for (size_t i = 0; i < data.size(); ++i) p[i] = data[i];
  } else {
    if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size() * sizeof(T));
  }
  return t.to(device);
}

template Tensor from_vector(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector(const std::vector<BFloat16>&, const Shape&, Device);
template Tensor from_vector(const std::vector<Half>&, const Shape&, Device);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, Device);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, Device);
template Tensor from_vector(const std::vector<bool>&, const Shape&, Device);

Tensor scalar_tensor(double value, TensorOptions o) { return full({}, value, o); }

Tensor from_blob(void* data, const Shape& shape, DType dtype, Storage::Deleter deleter) {
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return make_tensor(Storage::wrap(data, nbytes, Device::cpu(), std::move(deleter)), dtype, shape,
                     contiguous_strides(shape));
}

}  // namespace kiln
