// cat/stack: shape checks and dtype promotion here; the copies go through Tensor::copy_ into
// narrow() views of the output (copy_ handles strides, conversion, threading and devices), so they
// work on any device with no kernel of their own. split/chunk only build narrow() views.
#include <kiln/core/ops/join.h>

#include <kiln/core/factory.h>

namespace kiln::ops {

namespace {

// Every tensor defined and on the first one's device.
void check_inputs(const char* op, const std::vector<Tensor>& tensors) {
  KILN_CHECK_VALUE(!tensors.empty(), op, ": expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK_VALUE(tensors[i].defined(), op, ": tensor ", i, " is undefined");
    KILN_CHECK(tensors[i].device() == tensors[0].device(), op, ": expected tensors on one device, but tensor ", i,
               " is on ", tensors[i].device(), " and tensor 0 on ", tensors[0].device());
  }
}

void check_view_input(const char* op, const Tensor& x) { KILN_CHECK_VALUE(x.defined(), op, ": the input is undefined"); }

// cat without the input checks; `dim` already wrapped.
Tensor cat_impl(const char* op, const std::vector<Tensor>& tensors, int64_t dim) {
  const Tensor& first = tensors[0];
  Shape out_shape = first.shape();
  DType dt = first.dtype();
  for (size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool match = t.dim() == first.dim();
    for (int64_t d = 0; match && d < first.dim(); ++d) match = d == dim || t.size(d) == first.size(d);
    KILN_CHECK_VALUE(match, op, ": tensor ", i, " has shape ", t.shape(), " but tensor 0 has shape ", first.shape(),
                     "; sizes must match except in dim ", dim);
    out_shape[dim] += t.size(dim);
    dt = promote_types(dt, t.dtype());
  }
  Tensor out = empty(out_shape, dt, first.device());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    const int64_t n = t.size(dim);
    if (n > 0) out.narrow(dim, at, n).copy_(t);
    at += n;
  }
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  check_inputs("cat", tensors);
  KILN_CHECK_VALUE(tensors[0].dim() >= 1, "cat: cannot concatenate 0-dim tensors (tensor 0 has shape ",
                   tensors[0].shape(), "); use stack");
  return cat_impl("cat", tensors, wrap_dim(dim, tensors[0].dim(), "cat"));
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  check_inputs("stack", tensors);
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK_VALUE(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ", tensors[i].shape(),
                     " but tensor 0 has shape ", tensors[0].shape(), "; all must be equal");
    parts.push_back(tensors[i].unsqueeze(dim));
  }
  return cat_impl("stack", parts, dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_view_input("split", x);
  KILN_CHECK_VALUE(x.dim() >= 1, "split: expected a tensor with at least 1 dim, got shape ", x.shape());
  dim = wrap_dim(dim, x.dim(), "split");
  KILN_CHECK_VALUE(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int64_t n = x.size(dim);
  if (n == 0) return {x};
  std::vector<Tensor> out;
  for (int64_t at = 0; at < n; at += split_size) out.push_back(x.narrow(dim, at, std::min(split_size, n - at)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_view_input("split", x);
  KILN_CHECK_VALUE(x.dim() >= 1, "split: expected a tensor with at least 1 dim, got shape ", x.shape());
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    KILN_CHECK_VALUE(sizes[i] >= 0, "split: size ", i, " is negative (", sizes[i], ")");
    total += sizes[i];
  }
  KILN_CHECK_VALUE(total == x.size(dim), "split: sizes sum to ", total, " but dim ", dim, " of shape ", x.shape(),
                   " has size ", x.size(dim));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(dim, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_view_input("chunk", x);
  KILN_CHECK_VALUE(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  KILN_CHECK_VALUE(x.dim() >= 1, "chunk: expected a tensor with at least 1 dim, got shape ", x.shape());
  dim = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(dim);
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

}  // namespace kiln::ops
