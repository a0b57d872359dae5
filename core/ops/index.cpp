// Indexing ops. The fronts check shapes and dtypes, then run the CUDA kernels (core/cuda/kernels/index.h)
// or the CPU code here. On the CPU, indices are read once into checked int64 vectors; row copies
// are memcpy (dtype-agnostic), and gather/scatter walk "fibers" (all positions that differ only
// along `dim`), one fiber per thread at a time, so accumulations never race and never reorder.
#include <kiln/core/ops/index.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/cuda/kernels/index.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln::ops {

namespace {

// What an index points into, for error messages.
struct IndexTarget {
  const char* name;  // "input", "self", "weight", ...
  int64_t dim;
  const Shape& shape;
};

Shape unravel(int64_t flat, const Shape& shape) {
  Shape pos(shape.size(), 0);
  for (int64_t d = shape.ndim() - 1; d >= 0; --d) {
    pos[d] = flat % shape[d];
    flat /= shape[d];
  }
  return pos;
}

// The error for index value `v` at row-major position `position` of an index of shape
// `index_shape` (CPU and CUDA alike); `late`: a CUDA check read after the op returned.
[[noreturn]] void throw_bad_index(const char* op, const Shape& index_shape, int64_t position, int64_t v, int64_t size,
                                  const IndexTarget& target, bool late = false) {
  KILN_FAIL_INDEX(op, ": index ", v, " at position ", unravel(position, index_shape), " is out of range [0, ",
                   size, ") for dim ", target.dim, " of the ", target.name, " of shape ", target.shape,
                   late ? " (reported late: checked on the device and read at a later host sync, see Note [Deferred "
                          "device checks]; KILN_CUDA_CHECKS=immediate reports it from the op itself)"
                        : "");
  std::abort();  // not reached
}

// The entries of `index` in row-major order, each checked to lie in [0, size).
std::vector<int64_t> checked_indices(const char* op, const Tensor& index, int64_t size, const IndexTarget& target) {
  Tensor ic = index.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(ic.numel()));
  dispatch_index(index.dtype(), op, [&]<class I>() {
    const I* p = static_cast<const I*>(ic.data_ptr());
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t v = static_cast<int64_t>(p[i]);
      if (v < 0 || v >= size) throw_bad_index(op, index.shape(), int64_t(i), v, size, target);
      out[i] = v;
    }
  });
  return out;
}

// Throws the CPU's message for a fault a CUDA kernel recorded, now or later (Note [Deferred
// device checks]).
void report_fault(const char* op, const Tensor& index, const Tensor& record, int64_t size, const IndexTarget& target) {
  if constexpr (cuda::kBuilt)
    cuda::check_fault_record(record, [op, index_shape = index.shape(), size, name = target.name, dim = target.dim,
                                      shape = target.shape](int64_t position, int64_t value, bool late) {
      throw_bad_index(op, index_shape, position, value, size, {name, dim, shape}, late);
    });
}

// A target written through strides must not have two positions on one element (a broadcast view).
void check_no_internal_overlap(const char* op, const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    KILN_CHECK(t.shape()[d] <= 1 || t.strides()[d] != 0, op, ": the target of shape ", t.shape(), " and strides ",
               t.strides(), " is a broadcast view (several elements share memory); clone it first");
}

// Calls fn(offsets) once per position of `shape` with `dim` left out; offsets[k] is that
// position's element offset under strides[k]. fn walks `dim` itself, so one fiber is handled by
// one thread, start to end.
template <size_t N, class F>
void for_each_fiber(const Shape& shape, int64_t dim, const std::array<Strides, N>& strides, F&& fn) {
  Shape outer;
  std::array<Strides, N> st;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    if (d == dim) continue;
    outer.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  const int64_t count = shape_numel(outer);
  const int64_t len = std::max<int64_t>(1, shape[dim]);
  parallel_for(0, count, std::max<int64_t>(1, kGrainSize / len), [&](int64_t begin, int64_t end) {
    for (int64_t f = begin; f < end; ++f) {
      std::array<int64_t, N> off{};
      int64_t rem = f;
      for (int64_t d = outer.ndim() - 1; d >= 0; --d) {
        const int64_t i = rem % outer[d];
        rem /= outer[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * st[k][d];
      }
      fn(off);
    }
  });
}

// out (outer, m, inner) = x (outer, n, inner)[:, idx, :], both contiguous; bytes, any dtype.
void copy_rows(const Tensor& x, int64_t outer, int64_t n, int64_t inner, const std::vector<int64_t>& idx,
               Tensor& out) {
  const int64_t m = static_cast<int64_t>(idx.size());
  const size_t row_bytes = static_cast<size_t>(inner) * x.element_size();
  if (row_bytes == 0 || outer * m == 0) return;
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, outer * m, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / m, i = r % m;
      std::memcpy(dst + r * row_bytes, src + (o * n + idx[i]) * row_bytes, row_bytes);
    }
  });
}

// Sizes of the dims before and after `dim`.
std::pair<int64_t, int64_t> outer_inner(const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < shape.ndim(); ++d) inner *= shape[d];
  return {outer, inner};
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const bool gpu = on_cuda("index_select", {&x, &index});
  KILN_CHECK(x.dim() >= 1, "index_select: expected an input with at least 1 dim, got shape ", x.shape());
  KILN_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got shape ", index.shape());
  dim = wrap_dim(dim, x.dim(), "index_select");
  if constexpr (cuda::kBuilt) {
    if (gpu) {
      Shape out_shape = x.shape();
      out_shape[dim] = index.numel();
      Tensor out = empty(out_shape, x.dtype(), x.device());
      report_fault("index_select", index, cuda::index_select(x, dim, index, out), x.size(dim),
                   {"input", dim, x.shape()});
      return out;
    }
  }
  auto idx = checked_indices("index_select", index, x.size(dim), {"input", dim, x.shape()});
  Shape out_shape = x.shape();
  out_shape[dim] = static_cast<int64_t>(idx.size());
  Tensor out = empty(out_shape, x.dtype());
  auto [outer, inner] = outer_inner(x.shape(), dim);
  copy_rows(x.contiguous(), outer, x.size(dim), inner, idx, out);
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const bool gpu = on_cuda("gather", {&x, &index});
  KILN_CHECK(x.dim() >= 1, "gather: expected an input with at least 1 dim, got shape ", x.shape());
  dim = wrap_dim(dim, x.dim(), "gather");
  KILN_CHECK(index.dim() == x.dim(), "gather: index of shape ", index.shape(), " must have as many dims as the input ",
             x.shape());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(d == dim || index.size(d) <= x.size(d), "gather: index of shape ", index.shape(),
               " is larger than the input ", x.shape(), " in dim ", d, " (only dim ", dim, " may be larger)");
  if constexpr (cuda::kBuilt) {
    if (gpu) {
      Tensor out = empty(index.shape(), x.dtype(), x.device());
      report_fault("gather", index, cuda::gather(x, dim, index, out), x.size(dim), {"input", dim, x.shape()});
      return out;
    }
  }
  auto idx = checked_indices("gather", index, x.size(dim), {"input", dim, x.shape()});
  Tensor out = empty(index.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const Strides cs = contiguous_strides(index.shape());  // of out and of idx
  const int64_t len = index.size(dim), os = cs[dim], xs = x.stride(dim);
  dispatch_all(x.dtype(), "gather", [&]<class T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = out.data<T>();
    for_each_fiber<2>(index.shape(), dim, {x.strides(), cs}, [&](const std::array<int64_t, 2>& off) {
      for (int64_t j = 0; j < len; ++j) op[off[1] + j * os] = xp[off[0] + idx[off[1] + j * os] * xs];
    });
  });
  return out;
}

Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const bool gpu = on_cuda("scatter_add_", {&self, &index, &src});
  KILN_CHECK(self.dim() >= 1, "scatter_add_: expected a target with at least 1 dim, got shape ", self.shape());
  dim = wrap_dim(dim, self.dim(), "scatter_add_");
  KILN_CHECK(index.dim() == self.dim() && src.dim() == self.dim(), "scatter_add_: self ", self.shape(), ", index ",
             index.shape(), " and src ", src.shape(), " must have the same number of dims");
  KILN_CHECK(src.dtype() == self.dtype(), "scatter_add_: src is ", src.dtype(), " but self is ", self.dtype());
  for (int64_t d = 0; d < self.dim(); ++d) {
    KILN_CHECK(index.size(d) <= src.size(d), "scatter_add_: index of shape ", index.shape(),
               " is larger than src ", src.shape(), " in dim ", d);
    KILN_CHECK(d == dim || index.size(d) <= self.size(d), "scatter_add_: index of shape ", index.shape(),
               " is larger than self ", self.shape(), " in dim ", d, " (only dim ", dim, " may be larger)");
  }
  check_no_internal_overlap("scatter_add_", self);
  if constexpr (cuda::kBuilt) {
    if (gpu) {
      Tensor s = src.storage() == self.storage() ? src.clone() : src;
      report_fault("scatter_add_", index, cuda::scatter_add_(self, dim, index, s), self.size(dim),
                   {"self", dim, self.shape()});
      return self;
    }
  }
  auto idx = checked_indices("scatter_add_", index, self.size(dim), {"self", dim, self.shape()});
  if (idx.empty()) return self;
  Tensor s = src.storage() == self.storage() ? src.clone() : src;
  const Strides cs = contiguous_strides(index.shape());
  const int64_t len = index.size(dim), is = cs[dim], ts = self.stride(dim), ss = s.stride(dim);
  dispatch_numeric(self.dtype(), "scatter_add_", [&]<class T>() {
    T* tp = static_cast<T*>(self.data_ptr());
    const T* sp = static_cast<const T*>(s.data_ptr());
    for_each_fiber<3>(index.shape(), dim, {self.strides(), s.strides(), cs}, [&](const std::array<int64_t, 3>& off) {
      for (int64_t j = 0; j < len; ++j) {
        T& t = tp[off[0] + idx[off[2] + j * is] * ts];
        t = static_cast<T>(static_cast<acc_t<T>>(t) + static_cast<acc_t<T>>(sp[off[1] + j * ss]));
      }
    });
  });
  return self;
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  on_cuda("scatter_add", {&self, &index, &src});
  Tensor out = self.clone();
  scatter_add_(out, dim, index, src);
  return out;
}

Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const bool gpu = on_cuda("index_add_", {&self, &index, &src});
  KILN_CHECK(self.dim() >= 1, "index_add_: expected a target with at least 1 dim, got shape ", self.shape());
  KILN_CHECK(index.dim() <= 1, "index_add_: index must be 1-D, got shape ", index.shape());
  dim = wrap_dim(dim, self.dim(), "index_add_");
  KILN_CHECK(src.dtype() == self.dtype(), "index_add_: src is ", src.dtype(), " but self is ", self.dtype());
  Shape want = self.shape();
  want[dim] = index.numel();
  KILN_CHECK(src.shape() == want, "index_add_: src has shape ", src.shape(), ", expected ", want, " (self ",
             self.shape(), " with dim ", dim, " of size index.numel() = ", index.numel(), ")");
  check_no_internal_overlap("index_add_", self);
  if constexpr (cuda::kBuilt) {
    if (gpu) {
      Tensor s = src.storage() == self.storage() ? src.clone() : src;
      report_fault("index_add_", index, cuda::index_add_(self, dim, index, s), self.size(dim),
                   {"self", dim, self.shape()});
      return self;
    }
  }
  auto idx = checked_indices("index_add_", index, self.size(dim), {"self", dim, self.shape()});
  if (src.numel() == 0) return self;
  Tensor s = src.storage() == self.storage() ? src.clone() : src;
  const int64_t len = src.size(dim), ts = self.stride(dim), ss = s.stride(dim);
  dispatch_numeric(self.dtype(), "index_add_", [&]<class T>() {
    T* tp = static_cast<T*>(self.data_ptr());
    const T* sp = static_cast<const T*>(s.data_ptr());
    for_each_fiber<2>(src.shape(), dim, {self.strides(), s.strides()}, [&](const std::array<int64_t, 2>& off) {
      for (int64_t j = 0; j < len; ++j) {
        T& t = tp[off[0] + idx[j] * ts];
        t = static_cast<T>(static_cast<acc_t<T>>(t) + static_cast<acc_t<T>>(sp[off[1] + j * ss]));
      }
    });
  });
  return self;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  const bool gpu = on_cuda("embedding", {&weight, &ids});
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got shape ", weight.shape());
  if constexpr (cuda::kBuilt) {
    if (gpu) {
      Shape out_shape = ids.shape();
      out_shape.push_back(weight.size(1));
      Tensor out = empty(out_shape, weight.dtype(), weight.device());
      report_fault("embedding", ids, cuda::embedding(weight, ids, out), weight.size(0), {"weight", 0, weight.shape()});
      return out;
    }
  }
  auto idx = checked_indices("embedding", ids, weight.size(0), {"weight", 0, weight.shape()});
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  Tensor out = empty(out_shape, weight.dtype());
  copy_rows(weight.contiguous(), 1, weight.size(0), weight.size(1), idx, out);
  return out;
}

Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings) {
  const bool gpu = on_cuda("embedding_backward", {&grad_out, &ids});
  KILN_CHECK(num_embeddings >= 0, "embedding_backward: num_embeddings must be >= 0, got ", num_embeddings);
  KILN_CHECK(grad_out.dim() == ids.dim() + 1 &&
                 std::equal(ids.shape().begin(), ids.shape().end(), grad_out.shape().begin()),
             "embedding_backward: grad_out of shape ", grad_out.shape(), " must be the ids' shape ", ids.shape(),
             " plus one embedding dim");
  const int64_t C = grad_out.size(-1);
  const Shape table{num_embeddings, C};
  if constexpr (cuda::kBuilt) {
    if (gpu) {
      Tensor out = empty(table, grad_out.dtype(), grad_out.device());
      report_fault("embedding_backward", ids, cuda::embedding_backward(grad_out, ids, num_embeddings, out),
                  num_embeddings, {"gradient table", 0, table});
      return out;
    }
  }
  auto idx = checked_indices("embedding_backward", ids, num_embeddings, {"gradient table", 0, table});
  // Positions grouped by id, in position order (a stable counting sort).
  std::vector<int64_t> start(static_cast<size_t>(num_embeddings) + 1, 0), order(idx.size());
  for (int64_t v : idx) ++start[v + 1];
  for (int64_t v = 0; v < num_embeddings; ++v) start[v + 1] += start[v];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (size_t p = 0; p < idx.size(); ++p) order[fill[idx[p]]++] = static_cast<int64_t>(p);

  Tensor g = grad_out.contiguous();
  Tensor out = empty(table, grad_out.dtype());
  if (out.numel() == 0) return out;
  dispatch_numeric(grad_out.dtype(), "embedding_backward", [&]<class T>() {
    const T* gp = static_cast<const T*>(g.data_ptr());
    T* op = out.data<T>();
    parallel_for(0, num_embeddings, std::max<int64_t>(1, kGrainSize / C), [&](int64_t b, int64_t e) {
      std::vector<acc_t<T>> acc(static_cast<size_t>(C));
      for (int64_t v = b; v < e; ++v) {
        std::fill(acc.begin(), acc.end(), acc_t<T>(0));
        for (int64_t k = start[v]; k < start[v + 1]; ++k) {
          const T* row = gp + order[k] * C;
          for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<acc_t<T>>(row[c]);
        }
        for (int64_t c = 0; c < C; ++c) op[v * C + c] = static_cast<T>(acc[c]);
      }
    });
  });
  return out;
}

}  // namespace kiln::ops
