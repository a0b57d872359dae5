// Reductions over dims: sum, mean, var/std, amax/amin, max/min with indices, argmax/argmin.
// Floating inputs accumulate in double on the CPU and in float on CUDA (f64 in double); sum of
// integers or bool gives i64 (like torch). Results are the same for any thread count and on every
// run (Note [Deterministic reductions] in core/cpu/reduce.h, Note [CUDA reductions] in
// core/cuda/plan/reduce_plan.h).
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::ops {

// `dims` may be negative; an empty list means every dim; a repeated dim is an error.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Variance with Bessel's correction by default (divides by n - correction, like torch).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);

// Largest / smallest value; NaN wins (propagates), as in torch.
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Values and their i64 positions along `dim`: the first position on ties, the first NaN if any.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace kiln::ops
