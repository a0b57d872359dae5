// The float64 reference for matrix products, shared by the CPU and CUDA matmul tests: torch.matmul
// semantics written out as loops over values read element by element (test::values, not Kiln's
// copy kernels), with the size of each element's rounding error, and tanh GELU on top.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace kiln::test {

struct Expected {
  Shape shape;
  std::vector<double> value;  // row-major
  std::vector<double> scale;  // sum_k |a_ik * b_kj| (+ |bias_j|): the size of the rounding error
};

// a @ b (+ bias) for CPU tensors: 1-D operands promoted (a row on the left, a column on the right)
// and the added dim dropped from the shape, batch dims broadcast.
inline Expected reference_matmul(const Tensor& a, const Tensor& b, const Tensor& bias = Tensor()) {
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  const Shape as = a1 ? Shape{1, a.shape()[0]} : a.shape();
  const Shape bs = b1 ? Shape{b.shape()[0], 1} : b.shape();
  const int64_t da = as.ndim(), db = bs.ndim();
  const int64_t m = as[da - 2], k = as[da - 1], n = bs[db - 1];
  REQUIRE(bs[db - 2] == k);
  const int64_t ba = da - 2, bb = db - 2;  // batch dims of each
  const int64_t nb = std::max(ba, bb);
  Shape batch(nb, 1);
  for (int64_t d = 0; d < nb; ++d) {
    const int64_t sa = d - (nb - ba) >= 0 ? as[d - (nb - ba)] : 1;
    const int64_t sb = d - (nb - bb) >= 0 ? bs[d - (nb - bb)] : 1;
    REQUIRE((sa == sb || sa == 1 || sb == 1));
    batch[d] = std::max(sa, sb);
  }
  const std::vector<double> va = values(a), vb = values(b);  // row-major over as / bs
  const std::vector<double> vbias = bias.defined() ? values(bias) : std::vector<double>();
  Expected e;
  e.shape = batch;
  if (!a1) e.shape.push_back(m);
  if (!b1) e.shape.push_back(n);
  for_each_index(batch.empty() ? Shape{1} : batch, [&](const std::vector<int64_t>& bi) {
    int64_t oa = 0, ob = 0;  // the matrices of this batch entry (a size-1 dim broadcasts)
    for (int64_t d = 0; d < ba; ++d) oa = oa * as[d] + (as[d] == 1 ? 0 : bi[d + nb - ba]);
    for (int64_t d = 0; d < bb; ++d) ob = ob * bs[d] + (bs[d] == 1 ? 0 : bi[d + nb - bb]);
    oa *= m * k;
    ob *= k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double p = va[oa + i * k + kk] * vb[ob + kk * n + j];
          sum += p;
          mag += std::fabs(p);
        }
        if (bias.defined()) {
          sum += vbias[j];
          mag += std::fabs(vbias[j]);
        }
        e.value.push_back(sum);
        e.scale.push_back(mag);
      }
  });
  return e;
}

// Rounding grows with the dot length: rtol(dtype) * (1 + sqrt(K)/4) of sum |a b| per element.
inline double product_tolerance(double rtol, int64_t k) { return rtol * (1.0 + std::sqrt(double(k)) / 4.0); }

// Each element within tol_factor * sum|a b| of the reference; shape, dtype and contiguity match.
inline void check_product_within(const Tensor& out, const Expected& e, DType dt, double tol_factor, const std::string& what) {
  REQUIRE_MESSAGE(out.shape() == e.shape, what, ": shape ", out.shape(), ", expected ", e.shape);
  CHECK_MESSAGE(out.dtype() == dt, what, ": dtype ", dtype_name(out.dtype()), ", expected ", dtype_name(dt));
  CHECK_MESSAGE(out.is_contiguous(), what, ": result is not contiguous");
  const std::vector<double> got = values(out);
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = tol_factor * e.scale[i] + 1e-30;
    if (!(std::fabs(got[i] - e.value[i]) <= tol)) {
      FAIL_CHECK(what, ": element ", i, " is ", got[i], ", expected ", e.value[i], " (tol ", tol, ")");
      return;
    }
  }
}

inline double gelu_tanh_ref(double x) {
  const double kAlpha = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(kAlpha * (x + 0.044715 * x * x * x)));
}

// out = gelu_tanh(pre) where pre is `e`: |gelu'| <= 1.13 carries pre's error over, plus out's own
// rounding (rtol * |out|) and `tanh_error` * |pre| / 2 for a tanh evaluated approximately.
inline void check_gelu(const Tensor& out, const Expected& e, DType dt, double tol_factor, double rtol,
                       double tanh_error, const std::string& what) {
  REQUIRE_MESSAGE(out.shape() == e.shape, what, ": shape ", out.shape(), ", expected ", e.shape);
  CHECK_MESSAGE(out.dtype() == dt, what, ": dtype ", dtype_name(out.dtype()), ", expected ", dtype_name(dt));
  CHECK_MESSAGE(out.is_contiguous(), what, ": result is not contiguous");
  const std::vector<double> got = values(out);
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = gelu_tanh_ref(e.value[i]);
    const double tol = 1.2 * tol_factor * e.scale[i] + rtol * std::fabs(want) +
                       0.5 * tanh_error * std::fabs(e.value[i]) + 1e-30;
    if (!(std::fabs(got[i] - want) <= tol)) {
      FAIL_CHECK(what, ": element ", i, " is ", got[i], ", expected gelu(", e.value[i], ") = ", want, " (tol ", tol,
                 ")");
      return;
    }
  }
}

}  // namespace kiln::test
