// Copies on one CUDA device: Tensor::copy_, to(dtype), contiguous() and clone() of CUDA tensors
// end here. Transfers between the host and devices are cuda::copy_across (runtime.h).
#pragma once

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

// dst = src converted to dst's dtype, element by element, on dst's device (the current stream).
// Same device and shape; any dtypes (bool and 16-bit included), any strides and offsets, src may
// broadcast (stride 0). dst and src must not overlap (Tensor::copy_ clones src when they do).
// Contiguous same-dtype copies are a cudaMemcpyAsync; everything else is one kernel.
void copy_device(const Tensor& dst, const Tensor& src);

}  // namespace kiln::cuda
