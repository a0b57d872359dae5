// Factories. Random fills go through Philox by element index, so they are reproducible for any
// thread count.
#include <kiln/core/factory.h>

#include <cmath>
#include <cstring>

#include <kiln/core/dispatch.h>
#include <kiln/core/parallel.h>

namespace kiln {

Tensor empty(const Shape& shape, TensorOptions o) { return empty(shape, o.dtype_, o.device_); }
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
  KILN_CHECK(step != 0.0, "arange: step must be non-zero");
  KILN_CHECK(std::isfinite(start) && std::isfinite(end), "arange: start ", start, " and end ", end,
             " must be finite");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  Tensor t = empty({n}, o.dtype_, Device::cpu());
  dispatch_numeric(o.dtype_, "arange", [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<acc_t<T>>(start + double(i) * step));
  });
  return t.to(o.device_);
}

// Fills a fresh CPU tensor element by element from a per-index draw, then moves it to the device.
template <class Draw>
static Tensor random_fill(const Shape& shape, TensorOptions o, const char* op, Draw draw) {
  Tensor t = empty(shape, o.dtype_, Device::cpu());
  int64_t n = t.numel();
  dispatch_numeric(o.dtype_, op, [&]<class T>() {
    T* p = t.data<T>();
    parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(static_cast<acc_t<T>>(draw(i)));
    });
  });
  return t.to(o.device_);
}

Tensor rand(const Shape& shape, Generator& gen, TensorOptions o) {
  KILN_CHECK(is_floating(o.dtype_), "rand: expected a floating dtype, got ", o.dtype_);
  uint64_t seed = gen.seed(), first = gen.advance(shape_numel(shape));
  return random_fill(shape, o, "rand", [=](int64_t i) { return philox_uniform(seed, first + i); });
}
Tensor rand(const Shape& shape, TensorOptions o) { return rand(shape, default_generator(), o); }

Tensor randn(const Shape& shape, Generator& gen, TensorOptions o) {
  KILN_CHECK(is_floating(o.dtype_), "randn: expected a floating dtype, got ", o.dtype_);
  uint64_t seed = gen.seed(), first = gen.advance(shape_numel(shape));
  return random_fill(shape, o, "randn", [=](int64_t i) { return philox_normal(seed, first + i); });
}
Tensor randn(const Shape& shape, TensorOptions o) { return randn(shape, default_generator(), o); }

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions o) {
  KILN_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  uint64_t seed = gen.seed(), first = gen.advance(shape_numel(shape));
  double span = double(high - low);
  return random_fill(shape, o, "randint", [=](int64_t i) {
    return double(low + std::min<int64_t>(int64_t(philox_uniform(seed, first + i) * span), high - low - 1));
  });
}

Tensor& uniform_(Tensor& t, double low, double high, Generator& gen) {
  Tensor r = rand(t.shape(), gen, TensorOptions(DType::f64));
  KILN_CHECK(is_floating(t.dtype()), "uniform_: expected a floating tensor, got ", t.dtype());
  double* p = r.data<double>();
  for (int64_t i = 0, n = r.numel(); i < n; ++i) p[i] = low + (high - low) * p[i];
  t.copy_(r);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  Tensor r = randn(t.shape(), gen, TensorOptions(DType::f64));
  KILN_CHECK(is_floating(t.dtype()), "normal_: expected a floating tensor, got ", t.dtype());
  double* p = r.data<double>();
  for (int64_t i = 0, n = r.numel(); i < n; ++i) p[i] = mean + std * p[i];
  t.copy_(r);
  return t;
}

template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, Device device) {
  KILN_CHECK(static_cast<int64_t>(data.size()) == shape_numel(shape), "from_vector: ", data.size(),
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
