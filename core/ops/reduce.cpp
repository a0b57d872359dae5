// Reductions: each front plans the reduction as (outer, n, inner) over dense memory and hands it to
// the CPU kernels (core/cpu/reduce.cpp) or the CUDA ones (core/cuda/kernels/reduce.cu) through one
// dispatch line (Note [One dispatch line]), both declared as in core/cuda/kernels/reduce.h. Planning follows
// memory order, so a transposed input is reduced in place; only patterns like reducing dims 0 and 2
// of 3 need a copy.
#include <kiln/core/ops/reduce.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <kiln/core/cpu/reduce.h>
#include <kiln/core/cuda/kernels/reduce.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

// x is defined and on a device with kernels (checked before planning reads its shape).
void check_input(const char* op, const Tensor& x) { on_cuda(op, {&x}); }

struct Plan {
  Tensor src;  // dense memory read as (outer, n, inner)
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;            // the logical result shape
  Shape kept_sizes;           // kept dims in the order the kernel writes them
  Strides kept_out_strides;   // their strides in a contiguous out_shape tensor
  bool in_order = true;       // kernel order == logical order
};

Plan plan_reduction(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(std::max<int64_t>(nd, 1)), dims.empty());
  if (!dims.empty()) {
    for (int64_t d : dims) {
      int64_t w = wrap_dim(d, nd, op);
      KILN_CHECK_VALUE(!reduced[w], op, ": dim ", w, " appears more than once in the dims ", Shape(dims.begin(), dims.end()));
      reduced[w] = true;
    }
  }
  Plan p;
  p.src = x;
  if (nd == 0) return p;

  std::vector<int64_t> out_dim(nd, -1);
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[d]) out_dim[d] = p.out_shape.ndim();
    if (!reduced[d] || keepdim) p.out_shape.push_back(reduced[d] ? 1 : x.size(d));
  }
  if (keepdim)
    for (int64_t d = 0; d < nd; ++d) out_dim[d] = d;
  Strides out_strides = contiguous_strides(p.out_shape);

  // Dims in memory order (size-1 dims do not matter); fall back to a copy if not dense.
  std::vector<int64_t> order;
  for (int64_t d = 0; d < nd; ++d)
    if (x.size(d) != 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
  int64_t expected = 1;
  bool dense = true;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    dense = dense && x.stride(*it) == expected;
    expected *= x.size(*it);
  }
  if (!dense) {
    p.src = x.contiguous();
    std::sort(order.begin(), order.end());
  }
  // More than one run of reduced dims: copy with the kept dims first, then the reduced ones.
  int runs = 0;
  for (size_t j = 0; j < order.size(); ++j) runs += reduced[order[j]] && (j == 0 || !reduced[order[j - 1]]);
  if (runs > 1) {
    std::stable_partition(order.begin(), order.end(), [&](int64_t d) { return !reduced[d]; });
    Shape perm(order.begin(), order.end());
    for (int64_t d = 0; d < nd; ++d)
      if (x.size(d) == 1) perm.push_back(d);
    p.src = x.permute(perm).contiguous();
  }
  bool seen_reduced = false;
  for (int64_t d : order) {
    if (reduced[d]) {
      seen_reduced = true;
      p.n *= x.size(d);
    } else {
      (seen_reduced ? p.inner : p.outer) *= x.size(d);
      p.kept_sizes.push_back(x.size(d));
      p.kept_out_strides.push_back(out_strides[out_dim[d]]);
    }
  }
  // The kernel writes kept dims in memory order; it matches the logical order when their output
  // strides decrease.
  for (size_t j = 1; j < p.kept_out_strides.size(); ++j)
    p.in_order = p.in_order && p.kept_out_strides[j - 1] > p.kept_out_strides[j];
  return p;
}

// The logical result from `dst`, a contiguous tensor in the kernel's output order.
Tensor finish(const Plan& p, const Tensor& dst) {
  if (p.in_order) return dst.view(p.out_shape);
  Tensor out = empty(p.out_shape, dst.dtype(), dst.device());
  out.as_strided(p.kept_sizes, p.kept_out_strides, 0).copy_(dst.view(p.kept_sizes));
  return out;
}

Tensor new_result(const Plan& p, DType dtype, Device device) { return empty({p.outer * p.inner}, dtype, device); }

enum class Moment { sum, mean, var, std };

// sum / mean / var / std of floating inputs: accumulated in double (CUDA: float, f64 in double),
// rounded once to T.
Tensor floating_moment(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                       Moment kind, int64_t correction = 0) {
  check_input(op, x);
  Plan p = plan_reduction(op, x, dims, keepdim);
  Tensor dst = new_result(p, x.dtype(), x.device());
  if (kind == Moment::sum || kind == Moment::mean) {
    const double scale = kind == Moment::sum ? 1.0 : 1.0 / static_cast<double>(p.n);
    dispatch_device(op, {&x}, [&] { cuda::sum_reduce(op, p.src, p.outer, p.n, p.inner, scale, dst); },
                    [&] { KILN_CPU_KERNEL(sum_reduce)(op, p.src, p.outer, p.n, p.inner, scale, dst); });
  } else {
    const bool take_sqrt = kind == Moment::std;
    dispatch_device(op, {&x}, [&] { cuda::var_reduce(op, p.src, p.outer, p.n, p.inner, correction, take_sqrt, dst); },
                    [&] { KILN_CPU_KERNEL(var_reduce)(op, p.src, p.outer, p.n, p.inner, correction, take_sqrt, dst); });
  }
  return finish(p, dst);
}

// Shared by amax/amin/max/min/argmax/argmin: fills values (dtype of x) and/or indices (i64).
template <bool Max>
void extremum(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Tensor* values,
              Tensor* indices) {
  check_input(op, x);
  Plan p = plan_reduction(op, x, dims, keepdim);
  KILN_CHECK_VALUE(p.n > 0, op, ": cannot reduce over an empty dim (input of shape ", x.shape(), ")");
  Tensor vdst = values ? new_result(p, x.dtype(), x.device()) : Tensor();
  Tensor idst = indices ? new_result(p, DType::i64, x.device()) : Tensor();
  dispatch_device(op, {&x}, [&] { cuda::extremum_reduce(op, p.src, p.outer, p.n, p.inner, Max, vdst, idst); },
                  [&] { KILN_CPU_KERNEL(extremum_reduce)(op, p.src, p.outer, p.n, p.inner, Max, vdst, idst); });
  if (values) *values = finish(p, vdst);
  if (indices) *indices = finish(p, idst);
}

}  // namespace

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_input("sum", x);
  if (is_floating(x.dtype())) return floating_moment("sum", x, dims, keepdim, Moment::sum);
  Plan p = plan_reduction("sum", x, dims, keepdim);
  Tensor dst = new_result(p, DType::i64, x.device());
  dispatch_device("sum", {&x}, [&] { cuda::integer_sum_reduce("sum", p.src, p.outer, p.n, p.inner, dst); },
                  [&] { KILN_CPU_KERNEL(integer_sum_reduce)("sum", p.src, p.outer, p.n, p.inner, dst); });
  return finish(p, dst);
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return floating_moment("mean", x, dims, keepdim, Moment::mean);
}
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  return floating_moment("var", x, dims, keepdim, Moment::var, correction);
}
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  return floating_moment("std", x, dims, keepdim, Moment::std, correction);
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor v;
  extremum<true>("amax", x, dims, keepdim, &v, nullptr);
  return v;
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor v;
  extremum<false>("amin", x, dims, keepdim, &v, nullptr);
  return v;
}
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  ValuesIndices r;
  extremum<true>("max", x, {dim}, keepdim, &r.values, &r.indices);
  return r;
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  ValuesIndices r;
  extremum<false>("min", x, {dim}, keepdim, &r.values, &r.indices);
  return r;
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  Tensor i;
  extremum<true>("argmax", x, {dim}, keepdim, nullptr, &i);
  return i;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  Tensor i;
  extremum<false>("argmin", x, {dim}, keepdim, nullptr, &i);
  return i;
}

}  // namespace kiln::ops
