// triu/tril on the CPU: each (batch, row) of the output is one run copied from the input and two
// runs filled with zero, so rows are independent and split over threads freely.
#include <kiln/core/cpu/triangle.h>

#include <algorithm>
#include <utility>

#include <kiln/core/dispatch.h>
#include <kiln/core/parallel.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

// Row i keeps columns [lo(i), hi(i)) and zeroes the rest: upper keeps j - i >= diagonal, lower
// j - i <= diagonal.
void triangle(const Tensor& out, const Tensor& x, int64_t diagonal, bool upper) {
  const char* op = upper ? "triu" : "tril";
  const int64_t rows = x.size(-2), cols = x.size(-1);
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
}

}  // namespace kiln::cpu::KILN_CPU_CAP
