// CUDA reductions (kernels in reduce.cu; see Note [CUDA reductions] in reduce_plan.h). The front,
// core/ops/reduce.cpp, plans each reduction: `src` is dense memory read as (outer, n, inner) from
// src.data_ptr(), n is reduced, and each output is a contiguous (outer * inner) tensor on src's
// device. `op` names the op in dtype errors. Results are bitwise the same on every run.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// Floating src only: out (src's dtype) = scale * sum, accumulated in float (f64 in double).
void sum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, double scale,
                const Tensor& out);

// Integer or bool src: out (i64) = the sum, accumulated in i64.
void integer_sum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner,
                        const Tensor& out);

// Floating src only: out = (sum of (x - mean)^2) / (n - correction), square-rooted when `take_sqrt`
// (std). Two passes over src: the means, then the squared deviations, both in float (f64: double).
void var_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, int64_t correction,
                bool take_sqrt, const Tensor& out);

// The largest (`max`) or smallest value and its position along n: NaN wins (the first NaN), ties
// give the first position. Writes `values` (src's dtype) and/or `indices` (i64); an undefined
// tensor is skipped. Numeric dtypes (not bool); n >= 1.
void extremum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, bool max,
                     const Tensor& values, const Tensor& indices);

}  // namespace kiln::cuda
