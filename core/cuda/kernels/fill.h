// Fills of CUDA tensors that factories use (cuda::fill itself is declared in runtime.h).
#pragma once

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

// out[i] = start + i * step, computed in double as fma(i, step, start) (the CPU arange does the
// same) and converted to out's dtype. out: contiguous 1-d, any numeric dtype.
void arange(const Tensor& out, double start, double step);

}  // namespace kiln::cuda
