// Note [Autograd and core views]
// Core's view and copy methods (reshape, transpose, slice, expand, to, clone, ...) know nothing of
// gradients. When their input carries autograd state they call detail::autograd_derived_hook,
// which kiln_autograd installs once, before the first tensor gets such state; it records:
//   view:   gradient = zeros shaped like the input, with the view's slice of it set to g
//           (the view is re-applied to the zeros by Derivation::replay);
//   expand: gradient = g summed back to the input's shape;
//   copy:   gradient = g cast back to the input's dtype and device.
#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>

namespace kiln {

namespace {

class ViewBackward final : public autograd::OpNode {
 public:
  std::function<Tensor(const Tensor&)> replay;
  std::string name() const override { return "ViewBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const InputInfo& in = input_info[0];
    Tensor gin = zeros(in.shape, TensorOptions(g[0].dtype()).device(in.device));
    replay(gin).copy_(g[0]);
    return {input_grad(0, gin)};
  }
};

class ExpandBackward final : public autograd::OpNode {
 public:
  std::string name() const override { return "ExpandBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {input_grad(0, g[0])}; }
};

class CopyBackward final : public autograd::OpNode {
 public:
  std::string name() const override { return "CopyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    return {input_grad(0, g[0].to(input_info[0].device))};
  }
};

}  // namespace

namespace detail {

Tensor record_derived(const Tensor& input, Tensor output, Derivation derivation) {
  std::shared_ptr<autograd::OpNode> node;
  switch (derivation.kind) {
    case Derivation::Kind::view: {
      auto n = autograd::make_node<ViewBackward>({&input});
      if (n) n->replay = std::move(derivation.replay);
      node = n;
      break;
    }
    case Derivation::Kind::expand: node = autograd::make_node<ExpandBackward>({&input}); break;
    case Derivation::Kind::copy: node = autograd::make_node<CopyBackward>({&input}); break;
  }
  if (node) autograd::set_history(output, node);
  return output;
}

}  // namespace detail
}  // namespace kiln
