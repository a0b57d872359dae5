// Indexing kernels on the CPU. Indices are read once into int64 vectors, checked against the
// indexed size; row copies are memcpy (dtype-agnostic), and gather/scatter walk "fibers" (all
// positions that differ only along `dim`), one fiber per thread at a time, so accumulations never
// race and never reorder.
#include <kiln/core/cpu/index.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

// The entries of `index` in row-major order, read into `out`; returns the fault record (the first
// entry outside [0, size), if any).
Tensor read_indices(const char* op, const Tensor& index, int64_t size, std::vector<int64_t>& out) {
  Tensor record = empty({2}, TensorOptions(DType::i64));
  int64_t* r = record.data<int64_t>();
  r[0] = -1;
  r[1] = 0;
  Tensor ic = index.contiguous();
  out.resize(static_cast<size_t>(ic.numel()));
  dispatch_index(index.dtype(), op, [&]<class I>() {
    const I* p = static_cast<const I*>(ic.data_ptr());
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t v = static_cast<int64_t>(p[i]);
      if (v < 0 || v >= size) {
        r[0] = static_cast<int64_t>(i);
        r[1] = v;
        return;
      }
      out[i] = v;
    }
  });
  return record;
}

bool faulted(const Tensor& record) { return record.data<int64_t>()[0] >= 0; }

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
               const Tensor& out) {
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

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  std::vector<int64_t> idx;
  Tensor record = read_indices("index_select", index, x.size(dim), idx);
  if (faulted(record)) return record;
  auto [outer, inner] = outer_inner(x.shape(), dim);
  copy_rows(x.contiguous(), outer, x.size(dim), inner, idx, out);
  return record;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  std::vector<int64_t> idx;
  Tensor record = read_indices("gather", index, x.size(dim), idx);
  if (faulted(record) || out.numel() == 0) return record;
  const Strides cs = contiguous_strides(index.shape());  // of out and of idx
  const int64_t len = index.size(dim), os = cs[dim], xs = x.stride(dim);
  dispatch_all(x.dtype(), "gather", [&]<class T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = out.data<T>();
    for_each_fiber<2>(index.shape(), dim, {x.strides(), cs}, [&](const std::array<int64_t, 2>& off) {
      for (int64_t j = 0; j < len; ++j) op[off[1] + j * os] = xp[off[0] + idx[off[1] + j * os] * xs];
    });
  });
  return record;
}

Tensor scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  std::vector<int64_t> idx;
  Tensor record = read_indices("scatter_add_", index, self.size(dim), idx);
  if (faulted(record) || idx.empty()) return record;
  const Strides cs = contiguous_strides(index.shape());
  const int64_t len = index.size(dim), is = cs[dim], ts = self.stride(dim), ss = src.stride(dim);
  dispatch_numeric(self.dtype(), "scatter_add_", [&]<class T>() {
    T* tp = static_cast<T*>(self.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    for_each_fiber<3>(index.shape(), dim, {self.strides(), src.strides(), cs}, [&](const std::array<int64_t, 3>& off) {
      for (int64_t j = 0; j < len; ++j) {
        T& t = tp[off[0] + idx[off[2] + j * is] * ts];
        t = static_cast<T>(static_cast<acc_t<T>>(t) + static_cast<acc_t<T>>(sp[off[1] + j * ss]));
      }
    });
  });
  return record;
}

Tensor index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  std::vector<int64_t> idx;
  Tensor record = read_indices("index_add_", index, self.size(dim), idx);
  if (faulted(record) || src.numel() == 0) return record;
  const int64_t len = src.size(dim), ts = self.stride(dim), ss = src.stride(dim);
  dispatch_numeric(self.dtype(), "index_add_", [&]<class T>() {
    T* tp = static_cast<T*>(self.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    for_each_fiber<2>(src.shape(), dim, {self.strides(), src.strides()}, [&](const std::array<int64_t, 2>& off) {
      for (int64_t j = 0; j < len; ++j) {
        T& t = tp[off[0] + idx[j] * ts];
        t = static_cast<T>(static_cast<acc_t<T>>(t) + static_cast<acc_t<T>>(sp[off[1] + j * ss]));
      }
    });
  });
  return record;
}

Tensor embedding(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  std::vector<int64_t> idx;
  Tensor record = read_indices("embedding", ids, weight.size(0), idx);
  if (faulted(record)) return record;
  copy_rows(weight.contiguous(), 1, weight.size(0), weight.size(1), idx, out);
  return record;
}

Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings, const Tensor& out) {
  std::vector<int64_t> idx;
  Tensor record = read_indices("embedding_backward", ids, num_embeddings, idx);
  if (faulted(record)) return record;
  // Positions grouped by id, in position order (a stable counting sort).
  std::vector<int64_t> start(static_cast<size_t>(num_embeddings) + 1, 0), order(idx.size());
  for (int64_t v : idx) ++start[v + 1];
  for (int64_t v = 0; v < num_embeddings; ++v) start[v + 1] += start[v];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (size_t p = 0; p < idx.size(); ++p) order[fill[idx[p]]++] = static_cast<int64_t>(p);

  if (out.numel() == 0) return record;
  const int64_t C = grad_out.size(-1);
  Tensor g = grad_out.contiguous();
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
  return record;
}

}  // namespace kiln::cpu::KILN_CPU_CAP
