// CPU triu/tril: each (batch, row) of the output is one run copied from the input and two runs
// filled with zero, so rows are independent and split over threads freely.
#include <kiln/core/ops/triangle.h>

#include <algorithm>

#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln::ops {

namespace {

// Row r keeps columns [lo(r), hi(r)) and zeroes the rest.
template <class Range>
Tensor triangle(const char* op, const Tensor& x, Range keep) {
  check_cpu(op, {&x});
  KILN_CHECK(x.dim() >= 2, op, ": expected a tensor with at least 2 dims, got shape ", x.shape());
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor out = empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
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
        auto [lo, hi] = keep(i, cols);
        for (int64_t j = 0; j < lo; ++j) dst[j] = T{};
        for (int64_t j = lo; j < hi; ++j) dst[j] = src[j * cs];
        for (int64_t j = hi; j < cols; ++j) dst[j] = T{};
      }
    });
  });
  return out;
}

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle("triu", x, [diagonal](int64_t i, int64_t cols) {
    return std::pair<int64_t, int64_t>{std::clamp<int64_t>(i + diagonal, 0, cols), cols};
  });
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle("tril", x, [diagonal](int64_t i, int64_t cols) {
    return std::pair<int64_t, int64_t>{0, std::clamp<int64_t>(i + diagonal + 1, 0, cols)};
  });
}

}  // namespace kiln::ops
