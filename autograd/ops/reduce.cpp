// Differentiable reductions: the raw kiln::ops reductions plus a backward node each. Every
// backward first puts the reduced dims back into g (as size-1 dims) and then broadcasts g over
// the input: by expansion (sum, mean, var), or onto the arg-max / tied maxima (max, amax).
#include <kiln/autograd/ops/reduce.h>

#include <algorithm>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/index.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {

using autograd::Needs;
using autograd::record;
using autograd::saved;

namespace {

// The reduced dims wrapped to [0, ndim) and sorted; an empty list means every dim (as kiln::ops).
std::vector<int64_t> reduced_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> r;
  if (ndim == 0) return r;  // a 0-dim tensor reduces to itself
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) r.push_back(d);
    return r;
  }
  for (int64_t d : dims) r.push_back(wrap_dim(d, ndim, op));
  std::sort(r.begin(), r.end());
  return r;
}

// g of a reduction with `keepdim` false gets its reduced dims back as size 1 (a view).
Tensor restore_dims(Tensor g, const std::vector<int64_t>& sorted_dims, int64_t ndim, bool keepdim) {
  if (keepdim || ndim == 0) return g;
  for (int64_t d : sorted_dims) g = g.unsqueeze(d);
  return g;
}

// How many elements of x fold into each output element.
int64_t reduced_count(const Shape& shape, const std::vector<int64_t>& sorted_dims) {
  int64_t n = 1;
  for (int64_t d : sorted_dims) n *= shape[d];
  return n;
}

}  // namespace

Tensor sum(const Tensor& x_in) {
  const Tensor x = autograd::autocast_to_f32(x_in);
  return record(ops::sum(x), "SumBackward", {&x}, [shape = x.shape()](const Needs&) {
    return [shape](const Tensor& g) { return g.expand(shape); };
  });
}

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autograd::autocast_to_f32(x_in);
  Tensor out = ops::sum(x, dims, keepdim);
  return record(out, "SumBackward", {&x}, [&](const Needs&) {
    return [shape = x.shape(), d = reduced_dims(dims, x.dim(), "sum"), keepdim](const Tensor& g) {
      return restore_dims(g, d, shape.ndim(), keepdim).expand(shape);
    };
  });
}

Tensor mean(const Tensor& x_in) {
  const Tensor x = autograd::autocast_to_f32(x_in);
  return record(ops::mean(x), "MeanBackward", {&x}, [shape = x.shape()](const Needs&) {
    return [shape](const Tensor& g) { return ops::div(g, double(shape_numel(shape))).expand(shape); };
  });
}

Tensor mean(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autograd::autocast_to_f32(x_in);
  Tensor out = ops::mean(x, dims, keepdim);
  return record(out, "MeanBackward", {&x}, [&](const Needs&) {
    std::vector<int64_t> d = reduced_dims(dims, x.dim(), "mean");
    double n = double(reduced_count(x.shape(), d));
    return [shape = x.shape(), d, n, keepdim](const Tensor& g) {
      return ops::div(restore_dims(g, d, shape.ndim(), keepdim), n).expand(shape);
    };
  });
}

Tensor var(const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  const Tensor x = autograd::autocast_to_f32(x_in);
  Tensor out = ops::var(x, dims, correction, keepdim);
  return record(out, "VarBackward", {&x}, [&](const Needs&) {
    // d var / dx = 2 (x - mean) / (n - correction)
    std::vector<int64_t> d = reduced_dims(dims, x.dim(), "var");
    double denom = double(reduced_count(x.shape(), d) - correction);
    return [xs = saved(x), d, denom, keepdim](const Tensor& g) {
      Tensor centered = ops::sub(xs, ops::mean(xs, d, /*keepdim=*/true));
      Tensor gk = restore_dims(g, d, xs.dim(), keepdim);
      return ops::mul(ops::mul(centered, gk), 2.0 / denom);
    };
  });
}

Tensor var(const Tensor& x) { return var(x, {}, 1, false); }

Tensor std(const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  const Tensor x = autograd::autocast_to_f32(x_in);
  Tensor out = ops::std(x, dims, correction, keepdim);
  return record(out, "StdBackward", {&x}, [&](const Needs&) {
    // d std / dx = d var / dx / (2 std) = (x - mean) / ((n - correction) std)
    std::vector<int64_t> d = reduced_dims(dims, x.dim(), "std");
    double denom = double(reduced_count(x.shape(), d) - correction);
    return [xs = saved(x), out = saved(out), d, denom, keepdim](const Tensor& g) {
      Tensor centered = ops::sub(xs, ops::mean(xs, d, /*keepdim=*/true));
      Tensor gk = ops::div(restore_dims(g, d, xs.dim(), keepdim), restore_dims(out, d, xs.dim(), keepdim));
      return ops::mul(ops::mul(centered, gk), 1.0 / denom);
    };
  });
}

Tensor std(const Tensor& x) { return std(x, {}, 1, false); }

MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  ops::ValuesIndices r = ops::max(x, dim, keepdim);
  r.values = record(r.values, "MaxBackward", {&x}, [&](const Needs&) {
    // The gradient lands on the arg-max of each slice (scatter along dim).
    int64_t d = wrap_dim(dim, x.dim(), "max");
    return [d, keepdim, idx = r.indices](const Tensor& g, const autograd::OpNode& node) {
      if (node.input_info[0].shape.ndim() == 0) return g;
      Tensor gk = keepdim ? g : g.unsqueeze(d);
      Tensor ik = keepdim ? idx : idx.unsqueeze(d);
      Tensor gin = node.input_zeros(0, g.dtype());
      ops::scatter_add_(gin, d, ik, gk.contiguous());
      return gin;
    };
  });
  return {r.values, r.indices};
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = ops::amax(x, dims, keepdim);
  return record(out, "AmaxBackward", {&x}, [&](const Needs&) {
    // Every element equal to its slice's maximum gets g / (number of such elements).
    std::vector<int64_t> d = reduced_dims(dims, x.dim(), "amax");
    Tensor out_k = restore_dims(out, d, x.dim(), keepdim);
    return [xs = saved(x), mk = saved(out_k), d, keepdim](const Tensor& g) {
      Tensor mask = ops::eq(xs, mk).to(g.dtype());
      Tensor count = ops::sum(mask, d, /*keepdim=*/true);
      Tensor gk = restore_dims(g, d, xs.dim(), keepdim);
      return ops::mul(mask, ops::div(gk, count));
    };
  });
}

}  // namespace kiln
