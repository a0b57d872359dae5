// How one matrix product maps onto cuBLASLt calls (see Note [cuBLASLt GEMM] in
// core/cuda/kernels/matmul.cpp): operand layouts, batch strides, folding and the list of calls, from
// tensor metadata only. Header-only and free of CUDA headers, so a CPU test
// (tests/core/test_gemm_plan.cpp) checks the index math by running the planned calls with cuBLAS's
// column-major semantics on the host. The batch folding both backends share is in
// core/kernels/gemm_fold.h.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <vector>

#include <kiln/core/kernels/gemm_fold.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda::gemm_plan {

inline constexpr int64_t kMaxDim = INT32_MAX;       // rows, cols and batch count are int32 in cuBLASLt
inline constexpr int64_t kMaxBatchPerCall = 65535;  // larger batches go in several calls

// A Kiln matrix as cuBLASLt reads it: stored column-major as (rows, cols) with leading dim ld, and
// `trans` when the product uses its transpose. See Note [cuBLASLt GEMM].
struct LtMatrix {
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 1;
};

// The Kiln matrix (r, c) with strides (rs, cs) as the column-major operand whose op() is its
// transpose (c, r); nullopt when neither stride is a unit stride or rows/columns would overlap
// (e.g. a broadcast row). A dim of size 1 has no meaningful stride; ld then is the smallest legal.
inline std::optional<LtMatrix> lt_matrix(int64_t r, int64_t c, int64_t rs, int64_t cs) {
  if (c == 1 || cs == 1) {  // row-major: stored column-major as (c, r), op N
    const int64_t ld = r == 1 ? c : rs;
    if (ld >= std::max<int64_t>(c, 1)) return LtMatrix{false, c, r, std::max<int64_t>(ld, 1)};
  }
  if (r == 1 || rs == 1) {  // column-major (a transposed view): stored as (r, c), op T
    const int64_t ld = c == 1 ? r : cs;
    if (ld >= std::max<int64_t>(r, 1)) return LtMatrix{true, r, c, std::max<int64_t>(ld, 1)};
  }
  return std::nullopt;
}

inline std::optional<LtMatrix> lt_matrix(const Tensor& t) {  // the last two dims of t
  return lt_matrix(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1));
}

// One product in cuBLASLt's terms: D (m, n) = op(mat_b) (m, k) * op(mat_a) (k, n), D column-major
// with ld m, i.e. out (n, m) row-major. Batch strides are in elements, per Kiln operand.
struct Problem {
  DType dtype = DType::f32;
  LtMatrix mat_a, mat_b;  // our a and b; cuBLASLt's B and A
  int64_t m = 0, n = 0, k = 0;
  int64_t stride_a = 0, stride_b = 0, stride_out = 0;
};

// One cuBLASLt call: element offsets of the first matrices and the batch count.
struct Launch {
  int64_t off_a = 0, off_b = 0, off_out = 0;
  int64_t count = 1;
};

struct Product {
  Problem problem;
  std::vector<Launch> launches;
};

// a (batch..., M, K) and b (batch..., K, N) expanded to out's batch shape, both readable in place
// (lt_readable); out (batch..., M, N) contiguous and not empty, K > 0.
inline Product plan_product(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t nd = out.dim();
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Product p;
  p.problem.dtype = out.dtype();
  p.problem.m = n;
  p.problem.k = k;
  p.problem.mat_b = *lt_matrix(b);

  if (auto rs = gemm_fold::folded_row_stride(a, b, kMaxDim)) {
    const int64_t rows = out.numel() / n;
    p.problem.n = rows;
    p.problem.mat_a = *lt_matrix(rows, k, rows == 1 ? k : *rs, 1);
    p.launches.push_back(Launch{});
  } else {
    p.problem.n = m;
    p.problem.mat_a = *lt_matrix(a);
    // Batch dims of size > 1, outer to inner, merged where all three tensors allow.
    struct Dim {
      int64_t size, sa, sb, so;
    };
    std::vector<Dim> dims;
    for (int64_t d = 0; d < nd - 2; ++d) {
      const Dim cur{out.size(d), a.stride(d), b.stride(d), out.stride(d)};
      if (cur.size == 1) continue;
      if (!dims.empty()) {
        Dim& prev = dims.back();
        if (prev.sa == cur.sa * cur.size && prev.sb == cur.sb * cur.size && prev.so == cur.so * cur.size) {
          prev = Dim{prev.size * cur.size, cur.sa, cur.sb, cur.so};
          continue;
        }
      }
      dims.push_back(cur);
    }
    const Dim inner = dims.empty() ? Dim{1, 0, 0, 0} : dims.back();
    if (!dims.empty()) dims.pop_back();
    p.problem.stride_a = inner.sa;
    p.problem.stride_b = inner.sb;
    p.problem.stride_out = inner.so;
    // The outer dims on the host (an odometer), the inner one in calls of at most kMaxBatchPerCall.
    int64_t outer = 1;
    for (const Dim& d : dims) outer *= d.size;
    std::vector<int64_t> idx(dims.size(), 0);
    for (int64_t o = 0; o < outer; ++o) {
      int64_t oa = 0, ob = 0, oo = 0;
      for (size_t d = 0; d < dims.size(); ++d) {
        oa += idx[d] * dims[d].sa;
        ob += idx[d] * dims[d].sb;
        oo += idx[d] * dims[d].so;
      }
      for (int64_t c0 = 0; c0 < inner.size; c0 += kMaxBatchPerCall)
        p.launches.push_back(Launch{oa + c0 * inner.sa, ob + c0 * inner.sb, oo + c0 * inner.so,
                                    std::min(kMaxBatchPerCall, inner.size - c0)});
      for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
        if (++idx[d] < dims[d].size) break;
        idx[d] = 0;
      }
    }
  }
  const Problem& q = p.problem;
  KILN_CHECK(q.m <= kMaxDim && q.n <= kMaxDim && q.k <= kMaxDim, "matmul: product of ", a.shape(), " and ",
             b.shape(), " on ", out.device(), " has a dimension above ", kMaxDim, " (cuBLASLt's limit)");
  return p;
}

}  // namespace kiln::cuda::gemm_plan
