// The autograd methods core's Tensor declares (requires_grad, grad, backward, ...).
#include <kiln/autograd/engine.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln {

bool Tensor::requires_grad() const {
  AutogradMeta* m = autograd::meta(*this);
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  check_defined(*this, "requires_grad_");
  if (!requires_grad && !autograd::meta(*this)) return *this;
  AutogradMeta& m = autograd::ensure_meta(*this);
  KILN_CHECK(!m.grad_fn || requires_grad, "requires_grad_: can only change the flag of a leaf; this tensor "
             "(shape ", shape(), ") was computed by ", m.grad_fn->name(), " (use detach())");
  KILN_CHECK_VALUE(!requires_grad || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ",
                   dtype());
  m.requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  AutogradMeta* m = autograd::meta(*this);
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  AutogradMeta* m = autograd::meta(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined())
    KILN_CHECK_VALUE(grad.shape() == shape(), "set_grad: gradient of shape ", grad.shape(), " for a tensor of shape ",
                     shape());
  if (!grad.defined() && !autograd::meta(*this)) return;
  autograd::ensure_meta(*this).grad = grad;
}

Tensor Tensor::detach() const {
  check_defined(*this, "detach");
  return make_tensor(storage(), dtype(), shape(), strides(), offset());
}

void Tensor::retain_grad() const {
  check_defined(*this, "retain_grad");
  AutogradMeta* m = autograd::meta(*this);
  KILN_CHECK(m && (m->requires_grad || m->grad_fn), "retain_grad: the tensor (shape ", shape(),
             ") does not require grad");
  if (!m->grad_fn || m->retains_grad) return;
  m->retains_grad = true;
  // The hook holds the meta weakly: it must not keep the tensor's state alive.
  m->grad_fn->retain_hooks[m->output_nr].push_back([meta = impl()->weak_autograd_meta()](
                                                    const Tensor& g) {
    if (auto mm = meta.lock()) mm->grad = mm->grad.defined() ? ops::add(mm->grad, g) : g.clone();
    return Tensor();
  });
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

// As torch's VariableHooks::set_data: the same checks, then a shallow copy of the data fields.
void Tensor::set_data(const Tensor& new_data) const {
  check_defined(*this, "set_data", "tensor");
  check_defined(new_data, "set_data", "new_data");
  KILN_CHECK_VALUE(!requires_grad() || is_floating(new_data.dtype()), "set_data: data set to a tensor that requires "
                   "grad must be floating point, got ", new_data.dtype(), " (shape ", new_data.shape(), ") for a tensor "
                   "of shape ", shape());
  impl()->set_data(*new_data.impl());
}

}  // namespace kiln
