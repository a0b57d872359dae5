// Differentiable reductions.
#pragma once

#include <vector>

#include <kiln/core/tensor.h>

namespace kiln {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);
// Max over one dim: values are differentiable (the gradient goes to the arg-max), indices are i64.
struct MaxResult {
  Tensor values, indices;
};
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);  // ties share evenly

}  // namespace kiln
