// The CUDA GEMM's index math on the CPU (core/cuda/plan/gemm_plan.h): every product the CUDA tests run is
// planned into cuBLASLt calls, and the calls are executed on the host with cuBLAS's column-major
// semantics (op(A) (m, k) * op(B) (k, n) into D (m, n), leading dims, strided batches). The result
// must match the float64 reference, every output element must be written exactly once, and every
// call must satisfy cuBLASLt's layout rules. Runs without a GPU.
#include "test_util.h"

#include <algorithm>

#include <kiln/core/cuda/plan/gemm_plan.h>

#include "matmul_reference.h"

using namespace kiln;
using namespace kiln::cuda::gemm_plan;

namespace {

// Element (r, c) of a column-major matrix, or of its transpose when `trans`.
double op_at(const double* p, const LtMatrix& l, int64_t r, int64_t c) {
  return l.trans ? p[c + r * l.ld] : p[r + c * l.ld];
}

// The layout cuBLASLt is given for an operand that op() makes (rows, cols): legal and consistent.
void check_layout(const LtMatrix& l, int64_t rows, int64_t cols, const std::string& what) {
  CHECK_MESSAGE(l.rows == (l.trans ? cols : rows), what, ": stored rows ", l.rows);
  CHECK_MESSAGE(l.cols == (l.trans ? rows : cols), what, ": stored cols ", l.cols);
  CHECK_MESSAGE(l.ld >= std::max<int64_t>(l.rows, 1), what, ": ld ", l.ld, " below rows ", l.rows);
}

// Plans a2 (..., M, K) @ b2 (..., K, N) as cuda::gemm does (operands cuBLASLt cannot read are made
// contiguous, then expanded to the batch shape), runs the calls on the host, checks the result.
Product plan_and_run(const Tensor& a2, const Tensor& b2, const std::string& what) {
  REQUIRE(a2.dtype() == DType::f64);
  const Shape batch = broadcast_shapes(Shape(a2.shape().begin(), a2.shape().end() - 2),
                                       Shape(b2.shape().begin(), b2.shape().end() - 2));
  const int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  auto shape_of = [&](int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  const Tensor a = (lt_matrix(a2) ? a2 : a2.contiguous()).expand(shape_of(m, k));
  const Tensor b = (lt_matrix(b2) ? b2 : b2.contiguous()).expand(shape_of(k, n));
  Tensor out = full(shape_of(m, n), std::nan(""), DType::f64);
  const Product prod = plan_product(a, b, out);
  const Problem& p = prod.problem;
  CHECK_MESSAGE(p.m == n, what, ": m ", p.m);
  CHECK_MESSAGE(p.k == k, what, ": k ", p.k);
  check_layout(p.mat_b, p.m, p.k, what + " cuBLASLt A (our b)");
  check_layout(p.mat_a, p.k, p.n, what + " cuBLASLt B (our a)");
  REQUIRE_FALSE(prod.launches.empty());

  const double* pa = static_cast<const double*>(a.data_ptr());
  const double* pb = static_cast<const double*>(b.data_ptr());
  double* po = static_cast<double*>(out.data_ptr());
  std::vector<int> writes(out.numel(), 0);
  for (const Launch& l : prod.launches) {
    REQUIRE_MESSAGE((l.count >= 1 && l.count <= kMaxBatchPerCall), what, ": batch count ", l.count);
    for (int64_t c = 0; c < l.count; ++c) {
      const double* A = pb + l.off_b + c * p.stride_b;  // cuBLASLt's A is our b
      const double* B = pa + l.off_a + c * p.stride_a;
      const int64_t d0 = l.off_out + c * p.stride_out;
      for (int64_t j = 0; j < p.n; ++j)
        for (int64_t i = 0; i < p.m; ++i) {
          double sum = 0;
          for (int64_t kk = 0; kk < p.k; ++kk) sum += op_at(A, p.mat_b, i, kk) * op_at(B, p.mat_a, kk, j);
          const int64_t d = d0 + i + j * p.m;  // D column-major with ld m
          if (d < 0 || d >= out.numel()) FAIL(what, ": D element ", d, " outside the output");
          po[d] = sum;
          ++writes[d];
        }
    }
  }
  const auto once = std::count(writes.begin(), writes.end(), 1);
  CHECK_MESSAGE(once == out.numel(), what, ": ", out.numel() - once, " of ", out.numel(),
                " output elements not written exactly once");
  test::check_product_within(out, test::reference_matmul(a2, b2), DType::f64, 1e-12, what);
  return prod;
}

}  // namespace

TEST_CASE("lt_matrix: row-major, column-major, size-1 dims, and what must be copied") {
  auto is = [](std::optional<LtMatrix> l, bool trans, int64_t rows, int64_t cols, int64_t ld) {
    return l && l->trans == trans && l->rows == rows && l->cols == cols && l->ld == ld;
  };
  CHECK(is(lt_matrix(7, 33, 33, 1), false, 33, 7, 33));   // contiguous
  CHECK(is(lt_matrix(7, 33, 160, 1), false, 33, 7, 160));  // row-major with an outer stride
  CHECK(is(lt_matrix(7, 33, 1, 7), true, 7, 33, 7));       // a transposed view
  CHECK(is(lt_matrix(1, 33, 0, 1), false, 33, 1, 33));     // one row: its stride is free
  CHECK(is(lt_matrix(1, 33, 5, 2), true, 1, 33, 2));       // one row with a step
  CHECK(is(lt_matrix(7, 1, 1, 0), false, 1, 7, 1));        // one column
  CHECK(is(lt_matrix(7, 1, 3, 9), false, 1, 7, 3));        // one column with a step
  CHECK(is(lt_matrix(1, 1, 0, 0), false, 1, 1, 1));
  CHECK_FALSE(lt_matrix(7, 33, 66, 2));  // inner stride 2 both ways
  CHECK_FALSE(lt_matrix(7, 33, 0, 1));   // a broadcast row
  CHECK_FALSE(lt_matrix(7, 1, 0, 1));    // a broadcast column vector
  CHECK_FALSE(lt_matrix(7, 33, 20, 1));  // rows overlap
  CHECK_FALSE(lt_matrix(7, 33, 1, 5));   // columns overlap
}

TEST_CASE("planned calls compute every 2-D product, row- and column-major, odd sizes") {
  const int64_t sizes[][3] = {{1, 1, 1},    {7, 33, 65},     {65, 7, 33},  {33, 65, 1},   {1, 65, 7},
                              {7, 1, 33},   {130, 67, 129},  {129, 513, 7}, {1, 513, 33}, {513, 1, 9},
                              {513, 7, 1}};
  uint64_t seed = 1;
  for (auto& s : sizes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = test::random({s[0], s[1]}, DType::f64, seed++), b = test::random({s[1], s[2]}, DType::f64, seed++);
        // The same values stored transposed: a column-major view.
        const Tensor va = ta ? a.t().contiguous().t() : a, vb = tb ? b.t().contiguous().t() : b;
        const Product prod = plan_and_run(va, vb, detail::str_cat(s[0], "x", s[1], "x", s[2], ta ? " a^T" : "",
                                                                  tb ? " b^T" : ""));
        CHECK(prod.launches.size() == 1);
      }
}

TEST_CASE("planned calls for views: outer strides, steps, misaligned starts, 1-D operands") {
  const Tensor wide = test::random({14, 80}, DType::f64, 15);
  const Tensor b = test::random({33, 65}, DType::f64, 14), a = test::random({7, 33}, DType::f64, 13);
  plan_and_run(wide.slice(0, 0, 14, 2).slice(1, 3, 36), b, "row-major with an outer stride");
  plan_and_run(b.t(), wide.slice(0, 0, 14, 2).slice(1, 3, 36).t(), "both transposed views");
  plan_and_run(wide.slice(1, 0, 66, 2), b, "inner stride 2 (copied)");
  plan_and_run(a, test::random({66, 40}, DType::f64, 16).slice(0, 0, 66, 2).slice(1, 1, 40, 3), "stepped rhs");
  // 1-D operands as the front promotes them: a row on the left, a column on the right.
  const Tensor v = test::random({65}, DType::f64, 21), w = test::random({65}, DType::f64, 22);
  plan_and_run(v.unsqueeze(0), w.unsqueeze(1), "dot");
  plan_and_run(test::random({7, 65}, DType::f64, 23), v.unsqueeze(1), "mv");
  plan_and_run(v.unsqueeze(0), test::random({65, 33}, DType::f64, 24), "vm");
  plan_and_run(test::random({2, 3, 7, 65}, DType::f64, 25), v.unsqueeze(1), "batched mv");
  plan_and_run(v.unsqueeze(0), test::random({3, 65, 7}, DType::f64, 26), "vector times batch");
  plan_and_run(test::random({130}, DType::f64, 27).slice(0, 0, 130, 2).unsqueeze(0), test::random({65, 2}, DType::f64, 28),
               "strided vector");
  plan_and_run(test::random({7, 65}, DType::f64, 29), test::random({130}, DType::f64, 30).slice(0, 0, 130, 2).unsqueeze(1),
               "strided column vector");
}

TEST_CASE("planned calls for batches: broadcast, folded, unfoldable, expanded, transposed, split") {
  // Batch dims that do not collapse: a host loop over the outer dim.
  Product p = plan_and_run(test::random({2, 1, 7, 5}, DType::f64, 31), test::random({3, 5, 4}, DType::f64, 32),
                           "[2,1,7,5] @ [3,5,4]");
  CHECK(p.launches.size() == 2);
  CHECK(p.launches[0].count == 3);
  CHECK(p.problem.stride_a == 0);
  // A contiguous stack against one matrix: one GEMM with B*M rows (the linear layer).
  p = plan_and_run(test::random({4, 33, 65}, DType::f64, 33), test::random({65, 7}, DType::f64, 34),
                   "batch @ matrix (folded)");
  CHECK(p.launches.size() == 1);
  CHECK(p.launches[0].count == 1);
  CHECK(p.problem.n == 4 * 33);
  const Tensor x = test::random({2, 5, 33}, DType::f64, 35), weight = test::random({7, 33}, DType::f64, 36);
  p = plan_and_run(x, weight.t(), "linear on (B, T, C)");
  CHECK(p.launches.size() == 1);
  CHECK(p.problem.n == 10);
  CHECK(p.problem.mat_b.trans);  // the weight (out, in) read transposed, no copy
  p = plan_and_run(test::random({7, 4, 65}, DType::f64, 37).transpose(0, 1), test::random({65, 7}, DType::f64, 38),
                   "permuted batch @ matrix (not foldable)");
  CHECK(p.launches.size() == 1);
  CHECK(p.launches[0].count == 4);
  CHECK(p.problem.stride_b == 0);
  p = plan_and_run(test::random({33, 65}, DType::f64, 39), test::random({3, 65, 7}, DType::f64, 40),
                   "matrix @ batch");
  CHECK(p.problem.stride_a == 0);
  p = plan_and_run(test::random({1, 7, 33}, DType::f64, 41).expand({5, 7, 33}), test::random({5, 33, 7}, DType::f64, 42),
                   "expanded batch");
  CHECK(p.launches.size() == 1);
  CHECK(p.problem.stride_a == 0);
  const Tensor at_ = test::random({6, 33, 7}, DType::f64, 43).transpose(1, 2);  // (6, 7, 33)
  plan_and_run(at_, test::random({6, 1, 33}, DType::f64, 44).transpose(1, 2), "transposed batches");
  plan_and_run(at_, test::random({6, 65, 33}, DType::f64, 45).transpose(1, 2), "bmm transposed");
  plan_and_run(test::random({2, 3, 4, 5, 6}, DType::f64, 46).permute({0, 2, 1, 3, 4}),
               test::random({4, 1, 6, 2}, DType::f64, 47), "5-D permuted batch against a broadcast 4-D one");
  // A batch above one call's limit goes in several calls.
  p = plan_and_run(test::random({70001, 2, 3}, DType::f64, 48), test::random({70001, 3, 2}, DType::f64, 49),
                   "70001 batches");
  REQUIRE(p.launches.size() == 2);
  CHECK(p.launches[0].count == kMaxBatchPerCall);
  CHECK(p.launches[1].count == 70001 - kMaxBatchPerCall);
}
