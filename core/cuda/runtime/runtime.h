// The CUDA runtime as CPU code sees it: no CUDA headers here (STYLE.md), so every file can
// include it. Built without CUDA, the queries answer "no devices" and the transfers throw.
#pragma once

#include <kiln/core/cuda/runtime/allocator.h>
#include <kiln/cuda.h>

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

// Copies between devices (either side may be the CPU; Tensor::copy_ calls it with src already
// broadcast to dst's shape). Host <-> device transfers run on the CUDA device's current stream;
// they return only when the copy is done, unless `non_blocking` and the host tensor is pinned:
// then the copy is queued and the host memory is kept from reuse until it completes (the caller
// synchronizes the stream before reading a device-to-host result). Strided or dtype-changing
// copies are staged through contiguous buffers; the cast runs on the GPU.
void copy_across(const Tensor& dst, const Tensor& src, bool non_blocking = false);
// Fills a CUDA tensor with `value` converted to its dtype.
void fill(const Tensor& dst, double value);

}  // namespace kiln::cuda
