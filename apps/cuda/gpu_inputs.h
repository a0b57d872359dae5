// The inputs bench_cuda's cases and its --sweep time kernels on: seeded normal tensors on cuda:0.
#pragma once

#include <cstdint>

#include <kiln/kiln.h>

namespace kiln::apps {

inline TensorOptions on_gpu(DType dt) { return TensorOptions(dt).device(Device::cuda()); }

// N(0, scale^2) drawn in f32 from Generator(seed) on the CPU, then moved and cast: the same values
// whatever the dtype.
inline Tensor gpu_randn(const Shape& shape, DType dt, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return (randn(shape, g, DType::f32) * scale).to(Device::cuda()).to(dt);
}

}  // namespace kiln::apps
