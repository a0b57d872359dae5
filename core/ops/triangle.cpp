// triu/tril: each (batch, row) of the output is one run copied from the input and two runs filled
// with zero, so rows are independent and split over threads freely (CUDA: core/cuda/kernels/triangle.cu).
#include <kiln/core/ops/triangle.h>

#include <algorithm>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/kernels/triangle.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln::ops {

namespace {

// Row i keeps columns [lo(i), hi(i)) and zeroes the rest: upper keeps j - i >= diagonal, lower
// j - i <= diagonal.
Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool upper) {
  check_defined(x, op);
  KILN_CHECK(x.dim() >= 2, op, ": expected a tensor with at least 2 dims, got shape ", x.shape());
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  if constexpr (cuda::kBuilt) if (x.device().is_cuda()) {
    cuda::triangle(out, x, diagonal, upper);
    return out;
  }
  check_cpu(op, {&x});
  // Past the matrix every diagonal keeps the same ranges; clamping keeps i + diagonal in range.
  diagonal = std::clamp<int64_t>(diagonal, -rows - 1, cols + 1);
  auto keep = [&](int64_t i) {
    return upper ? std::pair<int64_t, int64_t>{std::clamp<int64_t>(i + diagonal, 0, cols), cols}
                 : std::pair<int64_t, int64_t>{0, std::clamp<int64_t>(i + diagonal + 1, 0, cols)};
  };
  const int64_t rs = x.stride(-2), cs = x.stride(-1);
  const int64_t batch = out.numel() / (rows * cols);
  // The batch dims of x, to find each matrix's start through its strides.
  const Shape bshape(x.shape().begin(), x.shape().end() - 2);
  const Strides bstrides(x.strides().begin(), x.strides().end() - 2);
  dispatch_all(x.dtype(), op, [&]<class T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* o = out.data<T>();
    parallel_for(0, batch * rows, std::max<int64_t>(1, kGrainSize / cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t m = r / rows, i = r % rows;
        int64_t base = 0, rem = m;
        for (int64_t d = bshape.ndim() - 1; d >= 0; --d) {
          base += (rem % bshape[d]) * bstrides[d];
          rem /= bshape[d];
        }
        const T* src = xp + base + i * rs;
        T* dst = o + r * cols;
        auto [lo, hi] = keep(i);
        for (int64_t j = 0; j < lo; ++j) dst[j] = T{};
        for (int64_t j = lo; j < hi; ++j) dst[j] = src[j * cs];
        for (int64_t j = hi; j < cols; ++j) dst[j] = T{};
      }
    });
  });
  return out;
}

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, false); }

}  // namespace kiln::ops
