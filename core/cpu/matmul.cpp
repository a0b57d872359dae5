// Matrix products on the CPU with Eigen's GEMM: operands are mapped in place (Eigen::Map with an
// outer stride, row- or column-major) so transposed and sliced views cost no copy; the output is a
// fresh contiguous row-major tensor written by one .noalias() product per matrix, no temporaries.
#include <kiln/core/cpu/matmul.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include <kiln/core/cpu/compute.h>
#include <kiln/core/cpu/eigen.h>
#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/factory.h>
#include <kiln/core/kernels/gemm_fold.h>
#include <kiln/core/parallel.h>
#if KILN_WITH_ONEDNN
#include <kiln/core/cpu/onednn/gemm.h>
#endif

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

using Eigen::Dynamic;

// Note [GEMM threading]
// Kiln threads its products itself and Eigen always runs single-threaded: Eigen's own parallel
// GEMM synchronises its threads by spinning once per packed block, which collapses when the
// machine is busy (a descheduled thread stalls the other). A batch of at least num_threads()
// matrices (or of small ones) is split over threads with parallel_for, one whole GEMM per
// iteration, so results do not depend on the thread count. A single big product is split into
// row blocks (column blocks when it has few rows), one fork-join per product; each block is its
// own Eigen GEMM, so results depend on the thread count only as far as Eigen's blocking does.
// With oneDNN (core/cpu/onednn/gemm.h) f32 products go to its sgemm instead: a single big product
// is one sgemm threaded by oneDNN, batches are split as above with one single-threaded sgemm each.
// KILN_ONEDNN_SGEMM=0 keeps f32 on Eigen (convolutions stay on oneDNN), to time the two: on the
// Xeon VM's AVX2 set oneDNN's sgemm is the faster at every size (docs/benchmarks.md).
constexpr double kSmallGemmWork = 128.0 * 128.0 * 128.0;  // M*N*K below which the batch is split

// How Eigen sees one (rows, cols) operand: row-major (unit stride along a row) or column-major
// (unit stride down a column, e.g. a transposed view), with the stride between rows/columns.
struct MatLayout {
  int64_t rows = 0, cols = 0;
  bool row_major = true;
  int64_t outer = 1;
};

// The layout for strides (rs, cs), or nullopt when neither is a unit stride or rows overlap
// (broadcast rows): such an operand is copied to contiguous first.
std::optional<MatLayout> eigen_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 || cols == 1) {
    int64_t outer = rows == 1 ? cols : rs;
    if (outer >= cols) return MatLayout{rows, cols, true, std::max<int64_t>(outer, 1)};
  }
  if (rs == 1 || rows == 1) {
    int64_t outer = cols == 1 ? rows : cs;
    if (outer >= rows) return MatLayout{rows, cols, false, std::max<int64_t>(outer, 1)};
  }
  return std::nullopt;
}

std::optional<MatLayout> eigen_layout(const Tensor& t) {  // the last two dims of t
  const int64_t nd = t.dim();
  return eigen_layout(t.shape()[nd - 2], t.shape()[nd - 1], t.strides()[nd - 2], t.strides()[nd - 1]);
}

// t itself when Eigen can map its matrices, else a contiguous copy.
Tensor mappable(const Tensor& t) { return eigen_layout(t) ? t : t.contiguous(); }

template <class T, int Order>
using ConstMatMap = Eigen::Map<const Eigen::Matrix<T, Dynamic, Dynamic, Order>, 0, Eigen::OuterStride<>>;

template <class T, class F>
void with_eigen_map(const T* p, const MatLayout& l, F&& f) {
  if (l.row_major)
    f(ConstMatMap<T, Eigen::RowMajor>(p, l.rows, l.cols, Eigen::OuterStride<>(l.outer)));
  else
    f(ConstMatMap<T, Eigen::ColMajor>(p, l.rows, l.cols, Eigen::OuterStride<>(l.outer)));
}

// c (la.rows, lb.cols), row-major with row stride ldc: c = a @ b, or c += a @ b when accumulating.
template <class T>
void gemm(const T* a, const MatLayout& la, const T* b, const MatLayout& lb, T* c, int64_t ldc, bool accumulate) {
#if KILN_WITH_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_sgemm_enabled()) {  // a column-major operand is the transpose of a row-major one
      onednn::sgemm(la.rows, lb.cols, la.cols, a, !la.row_major, la.outer, b, !lb.row_major, lb.outer, c, ldc,
                    accumulate);
      return;
    }
  }
#endif
  Eigen::Map<Eigen::Matrix<T, Dynamic, Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>> C(
      c, la.rows, lb.cols, Eigen::OuterStride<>(ldc));
  with_eigen_map(a, la, [&](const auto& A) {
    with_eigen_map(b, lb, [&](const auto& B) {
      if (accumulate)
        C.noalias() += A * B;
      else
        C.noalias() = A * B;
    });
  });
}

// Rows [r0, r1) of a, or columns [c0, c1) of b, as their own operand.
MatLayout row_block(const MatLayout& l, int64_t r0, int64_t r1, int64_t& offset) {
  offset = l.row_major ? r0 * l.outer : r0;
  return MatLayout{r1 - r0, l.cols, l.row_major, l.outer};
}
MatLayout col_block(const MatLayout& l, int64_t c0, int64_t c1, int64_t& offset) {
  offset = l.row_major ? c0 : c0 * l.outer;
  return MatLayout{l.rows, c1 - c0, l.row_major, l.outer};
}

// One product c (contiguous, la.rows x lb.cols) split over threads, see Note [GEMM threading].
template <class T>
void threaded_gemm(const T* a, const MatLayout& la, const T* b, const MatLayout& lb, T* c, bool accumulate) {
  const int64_t m = la.rows, n = lb.cols, threads = num_threads();
  const double work = double(m) * double(n) * double(la.cols);
  // oneDNN's sgemm threads one product itself (Note [oneDNN threads]).
  const bool threads_itself = std::is_same_v<T, float> && onednn_sgemm_enabled();
  if (threads <= 1 || work < kSmallGemmWork || threads_itself) {
    gemm<T>(a, la, b, lb, c, n, accumulate);
    return;
  }
  constexpr int64_t kAlign = 16;  // block edges on multiples of the register block
  const bool by_rows = m >= n || m >= threads * 4 * kAlign;
  const int64_t extent = by_rows ? m : n;
  const int64_t per = std::max<int64_t>(kAlign, (extent / threads + kAlign - 1) / kAlign * kAlign);
  parallel_for(0, (extent + per - 1) / per, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t e0 = i * per, e1 = std::min(extent, e0 + per);
      int64_t off = 0;
      if (by_rows) {
        const MatLayout block = row_block(la, e0, e1, off);
        gemm<T>(a + off, block, b, lb, c + e0 * n, n, accumulate);
      } else {
        const MatLayout block = col_block(lb, e0, e1, off);
        gemm<T>(a, la, b + off, block, c + e0, n, accumulate);
      }
    }
  });
}

// a (batch..., M, K) and b (batch..., K, N) expanded to one batch shape, in T; out (batch..., M, N)
// fresh contiguous T; bias (N) contiguous T or undefined.
template <class T>
void batched_product(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias) {
  const int64_t nd = out.dim();
  const int64_t m = a.shape()[nd - 2], k = a.shape()[nd - 1], n = b.shape()[nd - 1];
  T* c = out.data<T>();
  const int64_t rows = out.numel() / std::max<int64_t>(n, 1);
  if (out.numel() == 0) return;
  if (bias.defined()) {
    const T* pb = bias.data<T>();
    for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + n, c + r * n);
  } else if (k == 0) {
    std::fill(c, c + out.numel(), T(0));
  }
  if (k == 0) return;
  const bool accumulate = bias.defined();
  const MatLayout lb = *eigen_layout(b);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  Eigen::setNbThreads(1);  // see Note [GEMM threading]

  if (auto rs = gemm_fold::folded_row_stride(a, b, INT64_MAX)) {
    threaded_gemm<T>(pa, MatLayout{rows, k, true, std::max(*rs, k)}, pb, lb, c, accumulate);
    return;
  }
  const MatLayout la = *eigen_layout(a);
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const int64_t count = shape_numel(batch);
  std::vector<int64_t> off_a(count), off_b(count), idx(batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      oa += idx[d] * a.strides()[d];
      ob += idx[d] * b.strides()[d];
    }
    off_a[i] = oa;
    off_b[i] = ob;
    for (int64_t d = batch.ndim() - 1; d >= 0; --d) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  auto one = [&](int64_t i) { gemm<T>(pa + off_a[i], la, pb + off_b[i], lb, c + i * m * n, n, accumulate); };
  const double work = double(m) * double(n) * double(k);
  if (count > 1 && (work < kSmallGemmWork || count >= num_threads())) {
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(double(kGrainSize) / work));
    parallel_for(0, count, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < count; ++i)
      threaded_gemm<T>(pa + off_a[i], la, pb + off_b[i], lb, c + i * m * n, accumulate);
  }
}

}  // namespace

Tensor gemm(const Tensor& a2, const Tensor& b2, const Tensor& bias, const Shape& batch) {
  const int64_t m = a2.shape()[a2.dim() - 2], k = a2.shape()[a2.dim() - 1], n = b2.shape()[b2.dim() - 1];
  const DType dt = a2.dtype();
  const DType ct = compute_dtype(dt);  // 16-bit: f32, rounded once at the end
  auto full_shape = [&](int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  // Convert and fix the layout before expanding, so broadcast batches are never materialised.
  const Tensor a = mappable(a2.to(ct)).expand(full_shape(m, k));
  const Tensor b = mappable(b2.to(ct)).expand(full_shape(k, n));
  const Tensor bc = bias.defined() ? bias.to(ct).contiguous() : Tensor();
  Tensor out = empty(full_shape(m, n), ct);
  dispatch_compute(ct, [&]<class T>() { batched_product<T>(a, b, out, bc); });
  return out.to(dt);
}

std::optional<ops::LinearGelu> gemm_gelu(const Tensor&, const Tensor&, const Tensor&, const Shape&) {
  return std::nullopt;  // no GELU epilogue on the CPU
}

}  // namespace kiln::cpu::KILN_CPU_CAP
