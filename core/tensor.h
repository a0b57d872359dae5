// Tensor: a shared handle over Storage with shape, strides (in elements) and an offset.
// Copy semantics: copying a Tensor aliases the same TensorImpl (like torch::Tensor); views made
// by reshape/transpose/slice/expand/... share the Storage but have their own TensorImpl.
// Data-changing ops live in kiln::ops (core/ops/*.h); the differentiable API is autograd's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <kiln/core/device.h>
#include <kiln/core/dtype.h>
#include <kiln/core/error.h>
#include <kiln/core/shape.h>
#include <kiln/core/storage.h>

namespace kiln {

namespace detail {
/// Throws kiln::ValueError: `method` was called on an undefined tensor (Note [Undefined tensors]).
[[noreturn]] void throw_undefined_tensor(const char* method);
}  // namespace detail

struct AutogradMeta;  ///< defined by autograd/; core only carries the pointer

/// Note [TensorImpl]
/// The header one tensor handle reads its data through: which Storage, how (shape, strides and an
/// offset, in elements) and as what (dtype), plus autograd's state. Every copy of a Tensor points at
/// the same TensorImpl, so a change here is seen through all of them; views get their own.
/// Invariants, kept here rather than by each caller:
/// - storage is non-null and shape and strides have the same length;
/// - set_data is the only change to the data fields, and it keeps the autograd meta;
/// - the autograd meta is attached at most once and never replaced or dropped: the engine, the
///   leaf's hooks and retain_grad hold it (detach() makes a new TensorImpl instead).
/// Like torch's, a TensorImpl is not synchronised: do not change one tensor from two threads.
class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides, int64_t offset);

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }  ///< in elements
  DType dtype() const { return dtype_; }

  /// Takes src's storage, shape, strides, offset and dtype; this impl's autograd meta stays.
  /// Tensor::set_data is the user entry point (it checks what autograd requires first).
  void set_data(const TensorImpl& src);

  /// Autograd's state (autograd/meta.h), or null for a tensor that never had any.
  AutogradMeta* autograd_meta() const { return autograd_.get(); }
  std::weak_ptr<AutogradMeta> weak_autograd_meta() const { return autograd_; }
  /// Attaches autograd's state to a tensor that has none (a second attach is a bug in Kiln).
  void set_autograd_meta(std::shared_ptr<AutogradMeta> meta);

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
  std::shared_ptr<AutogradMeta> autograd_;
};

/// A shared handle over a TensorImpl: copies alias (like torch::Tensor); views share the Storage
/// but have their own TensorImpl. The differentiable ops users call are free functions
/// (autograd/ops); a default-constructed Tensor is undefined (Note [Undefined tensors]).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }  ///< false for a default-constructed Tensor
  TensorImpl* impl() const { return impl_.get(); }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }  ///< the same TensorImpl (not equal values)
  /// True when this handle is the only one to its tensor and the tensor the only one over its
  /// storage, which it fills exactly: nobody else can see a write to it (autograd steals such
  /// gradients instead of copying them).
  bool is_sole_owner() const;

  /// Metadata.
  const Shape& shape() const { return checked("shape").shape(); }
  const Strides& strides() const { return checked("strides").strides(); }  ///< in elements
  int64_t dim() const { return checked("dim").shape().ndim(); }  ///< number of dimensions
  int64_t size(int64_t d) const;  ///< extent of dim d (negative counts from the end)
  int64_t stride(int64_t d) const;  ///< stride of dim d, in elements
  int64_t numel() const { return shape_numel(checked("numel").shape()); }  ///< number of elements
  int64_t offset() const { return checked("offset").offset(); }  ///< first element in the storage, in elements
  DType dtype() const { return checked("dtype").dtype(); }  ///< element type
  Device device() const { return checked("device").storage()->device(); }  ///< its storage's device
  size_t element_size() const { return dtype_size(checked("element_size").dtype()); }  ///< bytes per element
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }  ///< numel() * element_size()
  bool is_contiguous() const;  ///< row-major with no gaps
  const std::shared_ptr<Storage>& storage() const { return checked("storage").storage(); }

  /// Pointer to the first element (storage base + offset).
  void* data_ptr() const {
    const TensorImpl& t = checked("data_ptr");
    return static_cast<char*>(t.storage()->data()) + t.offset() * static_cast<int64_t>(dtype_size(t.dtype()));
  }
  template <class T>
  T* data() const {
    KILN_CHECK(dtype_of<T> == dtype(), "data<", dtype_name(dtype_of<T>), ">() called on a ", dtype(), " tensor");
    return static_cast<T*>(data_ptr());
  }

  /// Views: no copy; the result shares storage with *this.
  Tensor view(const Shape& shape) const;  ///< -1 infers one dim; fails if the strides do not allow it
  Tensor reshape(const Shape& shape) const;  ///< a view when possible, else a contiguous copy
  Tensor transpose(int64_t dim0, int64_t dim1) const;  ///< dims swapped
  Tensor permute(const Shape& dims) const;  ///< dims reordered
  Tensor t() const;  ///< 2-D transpose
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  ///< python-like clamping
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;  ///< length entries of dim from start
  Tensor select(int64_t dim, int64_t index) const;  ///< one index of dim, which is removed
  Tensor expand(const Shape& shape) const;  ///< -1 keeps a dim; broadcast dims get stride 0
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;  ///< without its size-1 dims
  Tensor squeeze(int64_t dim) const;  ///< without dim, if its size is 1
  Tensor unsqueeze(int64_t dim) const;  ///< a size-1 dim inserted at dim
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;  ///< dims start..end as one
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t offset) const;  ///< any view of the storage

  /// Copies.
  Tensor contiguous() const;  ///< *this when already contiguous
  Tensor clone() const;       ///< always a fresh contiguous copy
  Tensor to(DType dtype) const;  ///< *this when already that dtype
  /// *this when already there. non_blocking: a host <-> device copy may return before it is done
  /// when the host side is pinned (a device -> host copy then lands in a fresh pinned tensor);
  /// synchronize the stream before reading it. Otherwise the copy has finished on return.
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(Device device, DType dtype) const { return to(device).to(dtype); }
  /// src broadcast to this shape, converted to this dtype; non_blocking as for to(Device).
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Tensor& fill_(double value);  ///< every element set to value
  Tensor& zero_() { return fill_(0.0); }  ///< fill_(0)

  /// Page-locked host memory (CUDA builds): a contiguous copy of this CPU tensor in pinned memory,
  /// which host <-> device copies read and write asynchronously; *this when already pinned.
  Tensor pin_memory() const;
  bool is_pinned() const;  ///< a CPU tensor whose storage is pinned

  /// The single element of a one-element tensor, converted.
  double item() const;
  template <class T>
  T item() const { return static_cast<T>(item()); }
  /// All elements in logical (row-major) order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  std::string str() const;  ///< shape, dtype, device and values, for printing

  /// Autograd. Declared here so a PyTorch user finds them as methods; defined by kiln_autograd
  /// (autograd/tensor_methods.cpp), which every program linking kiln::kiln has. Core itself
  /// never calls them. See Note [Autograd and core views] in autograd/view_hook.cpp, in the source tree.
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);  ///< leaves only; returns *this
  bool is_leaf() const;  ///< no grad_fn: created by the user, or under no_grad, or detached
  Tensor grad() const;   ///< the accumulated gradient of a leaf (undefined until a backward)
  void set_grad(const Tensor& grad) const;  ///< replaces .grad; an undefined tensor clears it
  Tensor detach() const;                    ///< same data, no history, requires_grad false
  void retain_grad() const;                 ///< keep .grad on a non-leaf too
  /// Backpropagates from this tensor: `gradient` defaults to 1 for a one-element tensor.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  /// torch's `tensor.data = new_data`: this tensor takes new_data's storage, shape, strides, offset
  /// and dtype (so its device too) and keeps its identity: every handle to it sees the change, and
  /// its requires_grad, .grad, hooks and autograd history stay (a parameter stays the parameter
  /// optimizers and DDP hold). new_data's own autograd state is not taken. As in torch, a tensor
  /// that requires grad takes only floating data, a view may be re-pointed (only that view changes,
  /// not the tensor it viewed), and .grad is left as it is (cast it yourself, as nn::Module::to does).
  void set_data(const Tensor& new_data) const;

 private:
  /// Note [Undefined tensors]
  /// A default-constructed Tensor (or .grad() before any backward) has no impl. Every method that
  /// needs one asks for it here, so misuse is a kiln::ValueError naming the method, as libtorch's
  /// UndefinedTensorImpl makes it an error, never a null dereference (test_undefined_tensor.cpp
  /// calls each method). defined(), impl(), is_same() and the autograd queries answer for it.
  const TensorImpl& checked(const char* method) const {
    if (impl_ == nullptr) [[unlikely]] detail::throw_undefined_tensor(method);
    return *impl_;
  }

  std::shared_ptr<TensorImpl> impl_;
};

/// Prints t.str().
std::ostream& operator<<(std::ostream& os, const Tensor& t);

namespace detail {
/// How a tensor derived by a core method (view, copy, cast) relates to its input, so autograd can
/// record it. `replay` re-applies a view to any tensor shaped like the input. `inverse`, set for
/// views that reach every element of the input exactly once (view, reshape, transpose, permute,
/// squeeze, unsqueeze, a full-range slice), maps a tensor shaped like the view back to the input's
/// shape, as a view where the layout allows: the view's gradient then needs no zeros and no copy.
struct Derivation {
  enum class Kind { view, expand, copy } kind = Kind::view;
  std::function<Tensor(const Tensor&)> replay;
  std::function<Tensor(const Tensor&)> inverse;
};
/// Installed once by kiln_autograd, before the first tensor gets autograd state; core calls it only
/// for inputs that carry such state (autograd_meta() set), so plain tensors never pay for it. The
/// pointer is atomic: threads creating autograd state never write it while others read it.
using AutogradDerivedHook = Tensor (*)(const Tensor& input, Tensor output, Derivation derivation);
/// Sets the hook; installing it again is a no-op, installing a different one a bug in Kiln.
void install_autograd_derived_hook(AutogradDerivedHook hook);
AutogradDerivedHook autograd_derived_hook();  ///< null until installed
}  // namespace detail

/// Makes a tensor header over `storage` (used by factories and kernels).
Tensor make_tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides, int64_t offset = 0);
/// A fresh contiguous tensor with uninitialised contents.
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());

/// Raises "<op>: expected a tensor on <device>" style errors; used by ops fronts.
void check_defined(const Tensor& t, const char* op, const char* arg = "input");

}  // namespace kiln

namespace kiln {
namespace ops {
void check_in_storage(const Tensor& t, const char* op, const char* arg);  ///< core/ops/common.h
}
template <class T>
std::vector<T> Tensor::to_vector() const {
  ops::check_in_storage(*this, "to_vector", "tensor");  // the copies below may all be no-ops
  Tensor c = to(Device::cpu()).to(dtype_of<T>).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
}  // namespace kiln
