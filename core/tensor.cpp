// Tensor metadata and views. Views only make a new TensorImpl over the same Storage.
#include <kiln/core/tensor.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <optional>

namespace kiln {

void detail::throw_undefined_tensor(const char* method) {
  throw ValueError(std::string("Tensor::") + method +
                   ": the tensor is undefined (a default-constructed Tensor, or .grad() before any backward)");
}

namespace detail {

// Written once (install_autograd_derived_hook), read by every view of a tensor with autograd state.
static std::atomic<AutogradDerivedHook> g_autograd_derived_hook{nullptr};

void install_autograd_derived_hook(AutogradDerivedHook hook) {
  KILN_ASSERT(hook != nullptr, "install_autograd_derived_hook: null hook");
  AutogradDerivedHook expected = nullptr;
  if (g_autograd_derived_hook.compare_exchange_strong(expected, hook, std::memory_order_acq_rel)) return;
  KILN_ASSERT(expected == hook, "install_autograd_derived_hook: a different hook is already installed");
}

AutogradDerivedHook autograd_derived_hook() { return g_autograd_derived_hook.load(std::memory_order_acquire); }

}  // namespace detail

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides, int64_t offset)
    : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset),
      dtype_(dtype) {
  KILN_ASSERT(storage_ != nullptr, "TensorImpl: null storage");
  KILN_ASSERT(shape_.size() == strides_.size(), "TensorImpl: shape ", shape_, " and strides ", strides_,
              " differ in length");
}

void TensorImpl::set_data(const TensorImpl& src) {
  if (&src == this) return;
  storage_ = src.storage_;
  shape_ = src.shape_;
  strides_ = src.strides_;
  offset_ = src.offset_;
  dtype_ = src.dtype_;
}

void TensorImpl::set_autograd_meta(std::shared_ptr<AutogradMeta> meta) {
  KILN_ASSERT(meta != nullptr, "set_autograd_meta: null meta");
  KILN_ASSERT(autograd_ == nullptr, "set_autograd_meta: the tensor already has autograd state");
  autograd_ = std::move(meta);
}

// Hands `out` to autograd when `in` carries autograd state; a no-op for plain tensors.
template <class Replay>
static Tensor derived(const Tensor& in, Tensor out, detail::Derivation::Kind kind, Replay&& replay) {
  if (in.impl()->autograd_meta() == nullptr) [[likely]] return out;
  auto hook = detail::autograd_derived_hook();
  if (hook == nullptr) return out;
  return hook(in, std::move(out), {kind, std::forward<Replay>(replay), nullptr});
}
// A view with an inverse (see Derivation::inverse): its gradient is inverse(g).
template <class Replay, class Inverse>
static Tensor derived_view(const Tensor& in, Tensor out, Replay&& replay, Inverse&& inverse) {
  if (in.impl()->autograd_meta() == nullptr) [[likely]] return out;
  auto hook = detail::autograd_derived_hook();
  if (hook == nullptr) return out;
  return hook(in, std::move(out),
              {detail::Derivation::Kind::view, std::forward<Replay>(replay), std::forward<Inverse>(inverse)});
}
constexpr auto kView = detail::Derivation::Kind::view;
constexpr auto kExpand = detail::Derivation::Kind::expand;
constexpr auto kCopy = detail::Derivation::Kind::copy;
constexpr auto kNoReplay = [](const Tensor& t) { return t; };

Tensor make_tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), dtype, std::move(shape), std::move(strides), offset));
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) KILN_CHECK_VALUE(d >= 0, "empty: negative dimension in shape ", shape);
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return make_tensor(Storage::allocate(nbytes, device), dtype, shape, contiguous_strides(shape));
}

void check_defined(const Tensor& t, const char* op, const char* arg) {
  KILN_CHECK_VALUE(t.defined(), op, ": ", arg, " is an undefined tensor");
}

bool Tensor::is_sole_owner() const {
  return defined() && impl_.use_count() == 1 && storage().use_count() == 1 && offset() == 0 && is_contiguous() &&
         nbytes() == storage()->nbytes();
}

int64_t Tensor::size(int64_t d) const {
  (void)checked("size");
  const int64_t w = wrap_dim(d, dim(), "size");
  return shape()[w];
}
int64_t Tensor::stride(int64_t d) const {
  (void)checked("stride");
  const int64_t w = wrap_dim(d, dim(), "stride");
  return strides()[w];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  const TensorImpl& t = checked("is_contiguous");
  const Shape& shape = t.shape();
  const Strides& strides = t.strides();
  for (int64_t d : shape)
    if (d == 0) return true;  // like torch: no element, nothing out of order (found by fuzz_safetensors)
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  (void)checked("as_strided");
  KILN_CHECK_VALUE(shape.size() == strides.size(), "as_strided: shape ", shape, " and strides ", strides,
                   " differ in length");
  // Bounds: the furthest element must lie inside the storage.
  if (shape_numel(shape) > 0) {
    int64_t last = offset;
    for (size_t i = 0; i < shape.size(); ++i) {
      KILN_CHECK_VALUE(strides[i] >= 0, "as_strided: negative stride ", strides[i], " in ", strides);
      last += (shape[i] - 1) * strides[i];
    }
    KILN_CHECK_VALUE(offset >= 0 && static_cast<size_t>(last + 1) * element_size() <= storage()->nbytes(),
                     "as_strided: shape ", shape, " strides ", strides, " offset ", offset, " reach element ", last,
                     " but the storage holds ", storage()->nbytes() / element_size(), " elements");
  }
  int64_t rel = offset - this->offset();  // replayed relative to the input's own offset
  return derived(*this, make_tensor(storage(), dtype(), shape, strides, offset), kView,
                 [=](const Tensor& t) { return t.as_strided(shape, strides, t.offset() + rel); });
}

// The strides that let `shape` view memory laid out as (old_shape, old_strides), if any.
// Old dims are grouped into runs that are contiguous with each other ("chunks"); each new dim
// must then fall inside one chunk, taking its stride from the chunk's innermost stride.
static std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (shape_numel(old_shape) == 0) return contiguous_strides(shape);
  struct Chunk { int64_t numel, inner_stride; };
  std::vector<Chunk> chunks;  // innermost first
  for (int64_t d = old_shape.ndim() - 1; d >= 0; --d) {
    if (old_shape[d] == 1) continue;
    if (!chunks.empty() && old_strides[d] == chunks.back().numel * chunks.back().inner_stride)
      chunks.back().numel *= old_shape[d];
    else
      chunks.push_back({old_shape[d], old_strides[d]});
  }
  Strides st(shape.size());
  size_t c = 0;
  int64_t filled = 1;  // product of new dims placed in chunk c so far
  for (int64_t d = shape.ndim() - 1; d >= 0; --d) {
    if (shape[d] == 1) {
      st[d] = c < chunks.size() ? filled * chunks[c].inner_stride : 1;
      continue;
    }
    if (c >= chunks.size()) return std::nullopt;
    st[d] = filled * chunks[c].inner_stride;
    filled *= shape[d];
    if (filled > chunks[c].numel || chunks[c].numel % filled != 0) return std::nullopt;
    if (filled == chunks[c].numel) { ++c; filled = 1; }
  }
  if (c != chunks.size()) return std::nullopt;
  return st;
}

static Shape infer_shape(const Shape& shape, int64_t numel, const Shape& from, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK_VALUE(infer < 0, op, ": only one dim can be -1 in ", shape);
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK_VALUE(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK_VALUE(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for input of shape ", from,
                     " (", numel, " elements)");
    out[infer] = numel / known;
  }
  KILN_CHECK_VALUE(shape_numel(out) == numel, op, ": shape ", shape, " is invalid for input of shape ", from, " (",
                   numel, " elements)");
  return out;
}

Tensor Tensor::view(const Shape& shape) const {
  (void)checked("view");
  Shape s = infer_shape(shape, numel(), this->shape(), "view");
  auto st = view_strides(this->shape(), strides(), s);
  KILN_CHECK_VALUE(st.has_value(), "view: cannot view a tensor of shape ", this->shape(), " and strides ", strides(),
                   " as ", s, " without a copy; use reshape()");
  return derived_view(*this, make_tensor(storage(), dtype(), s, *st, offset()),
                      [s](const Tensor& t) { return t.view(s); },
                      [in = this->shape()](const Tensor& g) { return g.reshape(in); });
}

Tensor Tensor::reshape(const Shape& shape) const {
  (void)checked("reshape");
  Shape s = infer_shape(shape, numel(), this->shape(), "reshape");
  if (auto st = view_strides(this->shape(), strides(), s))
    return derived_view(*this, make_tensor(storage(), dtype(), s, *st, offset()),
                        [s](const Tensor& t) { return t.reshape(s); },
                        [in = this->shape()](const Tensor& g) { return g.reshape(in); });
  return contiguous().view(s);  // both steps record themselves
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  (void)checked("transpose");
  int64_t a = wrap_dim(dim0, dim(), "transpose"), b = wrap_dim(dim1, dim(), "transpose");
  Shape s = shape();
  Strides st = strides();
  if (dim() == 0) return *this;
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return derived_view(*this, make_tensor(storage(), dtype(), s, st, offset()),
                      [a, b](const Tensor& t) { return t.transpose(a, b); },
                      [a, b](const Tensor& g) { return g.transpose(a, b); });
}

Tensor Tensor::permute(const Shape& dims) const {
  (void)checked("permute");
  KILN_CHECK_VALUE(dims.ndim() == dim(), "permute: got ", dims.size(), " dims ", dims, " for a tensor of ", dim(),
                   " dims");
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    KILN_CHECK_VALUE(!seen[d], "permute: dim ", d, " repeats in ", dims);
    seen[d] = true;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
  return derived_view(*this, make_tensor(storage(), dtype(), s, st, offset()),
                      [dims](const Tensor& t) { return t.permute(dims); },
                      [inverse](const Tensor& g) { return g.permute(inverse); });
}

Tensor Tensor::t() const {
  (void)checked("t");
  KILN_CHECK_VALUE(dim() <= 2, "t: expected a tensor of at most 2 dims, got shape ", shape());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  (void)checked("slice");
  d = wrap_dim(d, dim(), "slice");
  KILN_CHECK_VALUE(step > 0, "slice: step must be positive, got ", step);
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape();
  Strides st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_tensor(storage(), dtype(), s, st, offset() + start * strides()[d]);
  if (s[d] == n)  // the whole range: the gradient is g itself
    return derived_view(*this, std::move(out), [=](const Tensor& t) { return t.slice(d, start, end, step); },
                        [](const Tensor& g) { return g; });
  return derived(*this, std::move(out), kView, [=](const Tensor& t) { return t.slice(d, start, end, step); });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  (void)checked("narrow");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  KILN_CHECK_INDEX(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ", start + length,
                   ") is out of bounds for dim ", d, " of size ", n, " (shape ", shape(), ")");
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  (void)checked("select");
  d = wrap_dim(d, dim(), "select");
  int64_t n = shape()[d];
  KILN_CHECK_INDEX(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n,
                   " (shape ", shape(), ")");
  if (index < 0) index += n;
  Shape s = shape();
  Strides st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return derived(*this, make_tensor(storage(), dtype(), s, st, offset() + index * strides()[d]), kView,
                 [=](const Tensor& t) { return t.select(d, index); });
}

Tensor Tensor::expand(const Shape& shape) const {
  (void)checked("expand");
  KILN_CHECK_VALUE(shape.ndim() >= dim(), "expand: target shape ", shape, " has fewer dims than the tensor's ",
                   this->shape());
  Shape s(shape.size());
  Strides st(shape.size());
  int64_t lead = shape.ndim() - dim();
  for (int64_t i = 0; i < shape.ndim(); ++i) {
    if (i < lead) {
      KILN_CHECK_VALUE(shape[i] >= 0, "expand: invalid size ", shape[i], " in ", shape);
      s[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t have = this->shape()[i - lead];
    int64_t want = shape[i] == -1 ? have : shape[i];
    KILN_CHECK_VALUE(want == have || have == 1, "expand: cannot expand shape ", this->shape(), " to ", shape, " (dim ",
                     i, ": ", have, " to ", want, ")");
    s[i] = want;
    st[i] = want == have ? strides()[i - lead] : 0;
  }
  return derived(*this, make_tensor(storage(), dtype(), s, st, offset()), kExpand, kNoReplay);
}

Tensor Tensor::squeeze() const {
  (void)checked("squeeze");
  Shape s;
  Strides st;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape()[i] != 1) {
      s.push_back(shape()[i]);
      st.push_back(strides()[i]);
    }
  return derived_view(*this, make_tensor(storage(), dtype(), s, st, offset()),
                      [](const Tensor& t) { return t.squeeze(); },
                      [in = shape()](const Tensor& g) { return g.reshape(in); });
}

Tensor Tensor::squeeze(int64_t d) const {
  (void)checked("squeeze");
  d = wrap_dim(d, dim(), "squeeze");
  Shape s = shape();
  Strides st = strides();
  if (dim() > 0 && shape()[d] == 1) {
    s.erase(s.begin() + d);
    st.erase(st.begin() + d);
  }
  return derived_view(*this, make_tensor(storage(), dtype(), s, st, offset()),
                      [d](const Tensor& t) { return t.squeeze(d); },
                      [in = shape()](const Tensor& g) { return g.reshape(in); });
}

Tensor Tensor::unsqueeze(int64_t d) const {
  (void)checked("unsqueeze");
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape();
  Strides st = strides();
  int64_t stride = d < dim() ? strides()[d] * shape()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return derived_view(*this, make_tensor(storage(), dtype(), s, st, offset()),
                      [d](const Tensor& t) { return t.unsqueeze(d); },
                      [in = shape()](const Tensor& g) { return g.reshape(in); });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  (void)checked("flatten");
  if (dim() == 0) return reshape({1});
  int64_t a = wrap_dim(start_dim, dim(), "flatten"), b = wrap_dim(end_dim, dim(), "flatten");
  KILN_CHECK_VALUE(a <= b, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape s(shape().begin(), shape().begin() + a);
  int64_t n = 1;
  for (int64_t i = a; i <= b; ++i) n *= shape()[i];
  s.push_back(n);
  s.insert(s.end(), shape().begin() + b + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::contiguous() const {
  (void)checked("contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  (void)checked("clone");
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return derived(*this, out, kCopy, kNoReplay);
}

Tensor Tensor::to(DType dt) const {
  (void)checked("to");
  if (dt == dtype()) return *this;
  Tensor out = empty(shape(), dt, device());
  out.copy_(*this);
  return derived(*this, out, kCopy, kNoReplay);
}

Tensor Tensor::pin_memory() const {
  (void)checked("pin_memory");
  check_defined(*this, "pin_memory");
  KILN_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got one on ", device());
  if (is_pinned()) return *this;
  Tensor out = make_tensor(Storage::allocate_pinned(nbytes()), dtype(), shape(), contiguous_strides(shape()));
  out.copy_(*this);
  return derived(*this, out, kCopy, kNoReplay);
}

bool Tensor::is_pinned() const { return defined() && storage()->is_pinned(); }

double Tensor::item() const {
  (void)checked("item");
  KILN_CHECK_VALUE(numel() == 1, "item: expected a tensor with one element, got shape ", shape());
  ops::check_in_storage(*this, "item", "tensor");  // the copies below may all be no-ops
  Tensor c = to(Device::cpu()).to(DType::f64);
  return *static_cast<const double*>(c.data_ptr());
}

}  // namespace kiln
