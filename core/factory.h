// Tensor factories: filled, ranged, random (from a seeded Generator) and from host data. On a
// CUDA device they fill on the device; rand/randn/randint/uniform_/normal_ give there bitwise
// the values the CPU gives for the same generator state.
#pragma once

#include <initializer_list>
#include <vector>

#include <kiln/core/generator.h>
#include <kiln/core/tensor.h>

namespace kiln {

/// What a factory makes: dtype, device and whether CPU memory is pinned (torch's TensorOptions).
struct TensorOptions {
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  bool pinned_memory_ = false;  ///< CPU tensors in page-locked memory (CUDA builds; see pin_memory)

  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}    // NOLINT: zeros(shape, DType::f64) reads naturally
  TensorOptions(Device d) : device_(d) {}  // NOLINT
  TensorOptions& dtype(DType d) { dtype_ = d; return *this; }
  TensorOptions& device(Device d) { device_ = d; return *this; }
  TensorOptions& pinned_memory(bool p = true) { pinned_memory_ = p; return *this; }
};

///@{
/// New tensors of `shape`: uninitialized, zeros, ones or `value`; the _like forms take shape, dtype
/// and device from t.
Tensor empty(const Shape& shape, TensorOptions options);
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
///@}

///@{
/// [start, end) in steps of `step` (1-D). The default dtype is i64, like torch.arange on integers.
Tensor arange(double end, TensorOptions options = DType::i64);
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = DType::i64);
///@}

///@{
/// Uniform [low, high), standard normal scaled, and integers in [low, high).
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {});  ///< the default generator
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions options = DType::i64);
///@}

///@{
/// In-place fills from a generator (used by nn init).
Tensor& uniform_(Tensor& t, double low, double high, Generator& gen);
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen);
///@}

/// A tensor that owns a copy of host data (row-major) with the given shape.
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, Device device = Device::cpu());
/// 1-D from a braced list: tensor({1.f, 2.f, 3.f}).
template <class T>
Tensor tensor(std::initializer_list<T> values) {
  return from_vector(std::vector<T>(values), Shape{static_cast<int64_t>(values.size())});
}
/// A 0-dim tensor holding one value.
Tensor scalar_tensor(double value, TensorOptions options = {});

/// Wraps host memory without copying; the caller keeps it alive (deleter optional).
Tensor from_blob(void* data, const Shape& shape, DType dtype, Storage::Deleter deleter = nullptr);

}  // namespace kiln
