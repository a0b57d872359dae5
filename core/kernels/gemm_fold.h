// The batch folding both GEMM backends share (core/cpu/matmul.cpp, core/cuda/plan/gemm_plan.h):
// when a batched product's batches can run as one big GEMM. Metadata only; not installed.
#pragma once

#include <cstdint>
#include <optional>

#include <kiln/core/tensor.h>

namespace kiln::gemm_fold {

// When every batch of b is one matrix and a's batch and row dims merge into a single strided dim
// of row-major rows, at most max_rows of them, the batch is one GEMM: returns that dim's row stride
// (a's rows then number out.numel() / N).
inline std::optional<int64_t> folded_row_stride(const Tensor& a, const Tensor& b, int64_t max_rows) {
  const int64_t nd = a.dim();
  for (int64_t d = 0; d < nd - 2; ++d)
    if (b.size(d) != 1 && b.stride(d) != 0) return std::nullopt;
  const int64_t k = a.size(nd - 1);
  if (k != 1 && a.stride(nd - 1) != 1) return std::nullopt;
  int64_t size = 1, stride = k;  // the merged dim; a single row's stride does not matter
  bool any = false;
  for (int64_t d = nd - 2; d >= 0; --d) {
    const int64_t n = a.size(d), s = a.stride(d);
    if (n == 1) continue;
    if (!any) {
      size = n;
      stride = s;
      any = true;
      continue;
    }
    if (s != stride * size) return std::nullopt;
    size *= n;
  }
  if (size > 1 && stride < k) return std::nullopt;
  if (size > max_rows) return std::nullopt;
  return stride;
}

}  // namespace kiln::gemm_fold
