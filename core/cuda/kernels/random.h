// Random fills on CUDA with the CPU's Philox draws (core/philox.h): element i of a fill comes
// from (seed, first + i), so for the same generator state a CUDA tensor is bitwise equal to the
// CPU one (see Note [Bitwise-equal draws]). The callers reserve `first` with Generator::advance.
#pragma once

#include <cstdint>

#include <kiln/core/device.h>
#include <kiln/core/dtype.h>
#include <kiln/core/shape.h>

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

// What element i of a fill gets, from u = philox::uniform or z = philox::normal of (seed, first+i),
// computed in double and converted to the tensor's dtype like the CPU factories do.
enum class RandomDraw : uint8_t {
  uniform,  // u                 (rand)
  normal,   // z                 (randn)
  uniform_affine,  // fma(b, u, a)  (uniform_ with a = low, b = high - low)
  normal_affine,   // fma(b, z, a)  (normal_ with a = mean, b = std)
};

// out: contiguous, on a CUDA device, floating (or any numeric dtype, converted like the CPU does).
void random_fill(const Tensor& out, RandomDraw draw, double a, double b, uint64_t seed, uint64_t first);
// randint: low + min(int64(u * (high - low)), high - low - 1), for out of any numeric dtype.
void random_int(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t first);

// The dropout keep mask on `device`: (shape) of `dtype` (f32 or f64), element i is `scale` when
// philox::uniform(seed, first + i) >= p and 0 otherwise.
Tensor dropout_mask(const Shape& shape, DType dtype, double p, double scale, uint64_t seed, uint64_t first,
                    Device device);

}  // namespace kiln::cuda
