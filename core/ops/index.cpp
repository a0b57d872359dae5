// Indexing ops. The fronts check shapes and dtypes, then run the kernels of the operands' backend
// (core/cpu/index.cpp, core/cuda/kernels/index.cu) through one dispatch line (Note [One dispatch
// line]). Both return a fault record for the indices, which the front turns into its error for an
// out-of-range index: at once on the CPU, on CUDA now or later (Note [Deferred device checks]).
#include <kiln/core/ops/index.h>

#include <algorithm>
#include <cstdlib>

#include <kiln/core/cpu/index.h>
#include <kiln/core/cuda/kernels/index.h>
#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/backend.h>

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

// Throws the op's message for a fault its kernel recorded: a CPU record at once, a CUDA one now or
// later (Note [Deferred device checks]).
void report_fault(const char* op, const Tensor& index, const Tensor& record, int64_t size, const IndexTarget& target) {
  auto raise = [op, index_shape = index.shape(), size, name = target.name, dim = target.dim,
                shape = target.shape](int64_t position, int64_t value, bool late) {
    throw_bad_index(op, index_shape, position, value, size, {name, dim, shape}, late);
  };
  if (record.device().is_cpu()) {
    const int64_t* r = record.data<int64_t>();
    if (r[0] >= 0) raise(r[0], r[1], /*late=*/false);
    return;
  }
  cuda::check_fault_record(record, raise);
}

// A target written through strides must not have two positions on one element (a broadcast view).
void check_no_internal_overlap(const char* op, const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    KILN_CHECK_VALUE(t.shape()[d] <= 1 || t.strides()[d] != 0, op, ": the target of shape ", t.shape(), " and strides ",
                     t.strides(), " is a broadcast view (several elements share memory); clone it first");
}

// The end of scatter_add_ and index_add_: self += src at index's positions along `dim`, by the
// backend's kernel, which receives src copied first when it shares self's storage (so every
// element reads a stable value); a bad index is reported naming `op`.
template <class OnCuda, class OnCpu>
Tensor& accumulate(const char* op, Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                   OnCuda&& on_cuda_fn, OnCpu&& on_cpu_fn) {
  check_no_internal_overlap(op, self);
  const Tensor s = src.storage() == self.storage() ? src.clone() : src;
  Tensor fault = dispatch_device(op, {&self, &index, &s}, [&] { return on_cuda_fn(s); }, [&] { return on_cpu_fn(s); });
  report_fault(op, index, fault, self.size(dim), {"self", dim, self.shape()});
  return self;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  on_cuda("index_select", {&x, &index});
  KILN_CHECK_VALUE(x.dim() >= 1, "index_select: expected an input with at least 1 dim, got shape ", x.shape());
  KILN_CHECK_VALUE(index.dim() <= 1, "index_select: index must be 1-D, got shape ", index.shape());
  dim = wrap_dim(dim, x.dim(), "index_select");
  Shape out_shape = x.shape();
  out_shape[dim] = index.numel();
  Tensor out = empty(out_shape, x.dtype(), x.device());
  Tensor fault = dispatch_device("index_select", {&x, &index}, [&] { return cuda::index_select(x, dim, index, out); },
                                 [&] { return KILN_CPU_KERNEL(index_select)(x, dim, index, out); });
  report_fault("index_select", index, fault, x.size(dim), {"input", dim, x.shape()});
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  on_cuda("gather", {&x, &index});
  KILN_CHECK_VALUE(x.dim() >= 1, "gather: expected an input with at least 1 dim, got shape ", x.shape());
  dim = wrap_dim(dim, x.dim(), "gather");
  KILN_CHECK_VALUE(index.dim() == x.dim(), "gather: index of shape ", index.shape(), " must have as many dims as the input ",
                   x.shape());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK_VALUE(d == dim || index.size(d) <= x.size(d), "gather: index of shape ", index.shape(),
                     " is larger than the input ", x.shape(), " in dim ", d, " (only dim ", dim, " may be larger)");
  Tensor out = empty(index.shape(), x.dtype(), x.device());
  Tensor fault = dispatch_device("gather", {&x, &index}, [&] { return cuda::gather(x, dim, index, out); },
                                 [&] { return KILN_CPU_KERNEL(gather)(x, dim, index, out); });
  report_fault("gather", index, fault, x.size(dim), {"input", dim, x.shape()});
  return out;
}

Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  on_cuda("scatter_add_", {&self, &index, &src});
  KILN_CHECK_VALUE(self.dim() >= 1, "scatter_add_: expected a target with at least 1 dim, got shape ", self.shape());
  dim = wrap_dim(dim, self.dim(), "scatter_add_");
  KILN_CHECK_VALUE(index.dim() == self.dim() && src.dim() == self.dim(), "scatter_add_: self ", self.shape(), ", index ",
                   index.shape(), " and src ", src.shape(), " must have the same number of dims");
  KILN_CHECK_VALUE(src.dtype() == self.dtype(), "scatter_add_: src is ", src.dtype(), " but self is ", self.dtype());
  for (int64_t d = 0; d < self.dim(); ++d) {
    KILN_CHECK_VALUE(index.size(d) <= src.size(d), "scatter_add_: index of shape ", index.shape(),
                     " is larger than src ", src.shape(), " in dim ", d);
    KILN_CHECK_VALUE(d == dim || index.size(d) <= self.size(d), "scatter_add_: index of shape ", index.shape(),
                     " is larger than self ", self.shape(), " in dim ", d, " (only dim ", dim, " may be larger)");
  }
  return accumulate(
      "scatter_add_", self, dim, index, src, [&](const Tensor& s) { return cuda::scatter_add_(self, dim, index, s); },
      [&](const Tensor& s) { return KILN_CPU_KERNEL(scatter_add_)(self, dim, index, s); });
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  on_cuda("scatter_add", {&self, &index, &src});
  Tensor out = self.clone();
  scatter_add_(out, dim, index, src);
  return out;
}

Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  on_cuda("index_add_", {&self, &index, &src});
  KILN_CHECK_VALUE(self.dim() >= 1, "index_add_: expected a target with at least 1 dim, got shape ", self.shape());
  KILN_CHECK_VALUE(index.dim() <= 1, "index_add_: index must be 1-D, got shape ", index.shape());
  dim = wrap_dim(dim, self.dim(), "index_add_");
  KILN_CHECK_VALUE(src.dtype() == self.dtype(), "index_add_: src is ", src.dtype(), " but self is ", self.dtype());
  Shape want = self.shape();
  want[dim] = index.numel();
  KILN_CHECK_VALUE(src.shape() == want, "index_add_: src has shape ", src.shape(), ", expected ", want, " (self ",
                   self.shape(), " with dim ", dim, " of size index.numel() = ", index.numel(), ")");
  return accumulate(
      "index_add_", self, dim, index, src, [&](const Tensor& s) { return cuda::index_add_(self, dim, index, s); },
      [&](const Tensor& s) { return KILN_CPU_KERNEL(index_add_)(self, dim, index, s); });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  on_cuda("embedding", {&weight, &ids});
  KILN_CHECK_VALUE(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got shape ", weight.shape());
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  Tensor out = empty(out_shape, weight.dtype(), weight.device());
  Tensor fault = dispatch_device("embedding", {&weight, &ids}, [&] { return cuda::embedding(weight, ids, out); },
                                 [&] { return KILN_CPU_KERNEL(embedding)(weight, ids, out); });
  report_fault("embedding", ids, fault, weight.size(0), {"weight", 0, weight.shape()});
  return out;
}

Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings) {
  on_cuda("embedding_backward", {&grad_out, &ids});
  KILN_CHECK_VALUE(num_embeddings >= 0, "embedding_backward: num_embeddings must be >= 0, got ", num_embeddings);
  KILN_CHECK_VALUE(grad_out.dim() == ids.dim() + 1 &&
                       std::equal(ids.shape().begin(), ids.shape().end(), grad_out.shape().begin()),
                   "embedding_backward: grad_out of shape ", grad_out.shape(), " must be the ids' shape ", ids.shape(),
                   " plus one embedding dim");
  const int64_t C = grad_out.size(-1);
  const Shape table{num_embeddings, C};
  Tensor out = empty(table, grad_out.dtype(), grad_out.device());
  Tensor fault = dispatch_device("embedding_backward", {&grad_out, &ids},
                                 [&] { return cuda::embedding_backward(grad_out, ids, num_embeddings, out); },
                                 [&] { return KILN_CPU_KERNEL(embedding_backward)(grad_out, ids, num_embeddings, out); });
  report_fault("embedding_backward", ids, fault, num_embeddings, {"gradient table", 0, table});
  return out;
}

}  // namespace kiln::ops
