// AutogradMeta helpers: creating it, finding gradient edges, leaf accumulators and hooks.
#include <kiln/autograd/meta.h>

#include <kiln/autograd/grad_mode.h>

namespace kiln {

namespace detail {
Tensor record_derived(const Tensor& input, Tensor output, Derivation derivation);  // view_hook.cpp
}

namespace autograd {

AutogradMeta& ensure_meta(const Tensor& t) {
  KILN_CHECK_VALUE(t.defined(), "autograd: undefined tensor");
  // Core's derived-tensor hook, installed once before the first meta exists (a function-local
  // static: thread-safe, and independent of static initialisation order). Readers load it
  // atomically, so threads creating metas never race threads taking views.
  static const bool hook_installed = (detail::install_autograd_derived_hook(&detail::record_derived), true);
  (void)hook_installed;
  TensorImpl* impl = t.impl();
  if (impl->autograd_meta() == nullptr) impl->set_autograd_meta(std::make_shared<AutogradMeta>());
  return *impl->autograd_meta();
}

std::shared_ptr<AccumulateGrad> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& m = ensure_meta(leaf);
  KILN_ASSERT(!m.grad_fn, "grad_accumulator asked for a non-leaf");
  if (auto acc = m.accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(leaf);
  m.accumulator = acc;
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta(t);
  if (!m) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (m->requires_grad) return {grad_accumulator(t), 0};
  return {};
}

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      g.zero_();
  }
}

void register_hook(const Tensor& t, GradHook hook) {
  AutogradMeta* m = meta(t);
  KILN_CHECK(m && (m->requires_grad || m->grad_fn), "register_hook: the tensor (shape ", t.shape(),
             ") does not require grad");
  if (m->grad_fn)
    m->grad_fn->pre_hooks[m->output_nr].push_back(std::move(hook));
  else
    m->hooks.push_back(std::move(hook));
}

void register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook) {
  AutogradMeta* m = meta(leaf);
  KILN_CHECK(m && m->requires_grad && !m->grad_fn, "register_post_accumulate_grad_hook: expected a leaf that "
             "requires grad (shape ", leaf.shape(), ")");
  m->post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace autograd
}  // namespace kiln
