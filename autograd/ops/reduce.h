// Differentiable reductions.
#pragma once

#include <vector>

#include <kiln/core/tensor.h>

namespace kiln {

///@{
/// Sum and mean of every element (a 0-dim tensor), or over `dims`, keeping them as size 1 with keepdim.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
///@}

///@{
/// Variance and standard deviation as torch.var/torch.std: over `dims` (an empty list: every
/// element), dividing the squared deviations by n - correction. correction 1 (the default, Bessel's:
/// torch's unbiased=True) is the unbiased estimate, 0 the population variance (unbiased=False):
/// var(x) is torch.var(x), var(x, {}, 0) is torch.var(x, unbiased=False) = torch.var(x, correction=0).
/// No bool overload: var(x, {1}) must stay "over dim 1", which a bool parameter would capture.
/// n - correction <= 0 gives inf or NaN, as torch. The gradient of std at std == 0 is NaN (0/0).
Tensor var(const Tensor& x);
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);
///@}

/// Max over one dim: values are differentiable (the gradient goes to the arg-max), indices are i64.
struct MaxResult {
  Tensor values, indices;
};
/// The largest values along `dim` and their indices (torch.max(x, dim)).
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);  ///< ties share evenly

}  // namespace kiln
