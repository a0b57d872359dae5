// Note [Autograd and core views]
// Core's view and copy methods (reshape, transpose, slice, expand, to, clone, ...) know nothing of
// gradients. When their input carries autograd state they call detail::autograd_derived_hook,
// which kiln_autograd installs once, before the first tensor gets such state; it records:
//   view:   a view that reaches every input element once (reshape, transpose, permute, squeeze,
//           unsqueeze, a full slice): gradient = Derivation::inverse(g), a view of g where its
//           layout allows (no allocation, no copy); any other view: zeros shaped like the input,
//           with the view's part of them set to g (the view is re-applied by Derivation::replay);
//   expand: gradient = g summed back to the input's shape;
//   copy:   gradient = g cast back to the input's dtype and device.
#include <kiln/autograd/function.h>

namespace kiln::detail {

Tensor record_derived(const Tensor& input, Tensor output, Derivation derivation) {
  using autograd::Needs;
  using autograd::OpNode;
  switch (derivation.kind) {
    case Derivation::Kind::view:
      if (derivation.inverse)
        return autograd::record(std::move(output), "ViewBackward", {&input}, [&](const Needs&) {
          return [inverse = std::move(derivation.inverse)](const Tensor& g) { return inverse(g); };
        });
      return autograd::record(std::move(output), "ViewBackward", {&input}, [&](const Needs&) {
        return [replay = std::move(derivation.replay)](const Tensor& g, const OpNode& node) {
          Tensor gin = node.input_zeros(0, g.dtype());
          replay(gin).copy_(g);
          return gin;
        };
      });
    case Derivation::Kind::expand:
      return autograd::record(std::move(output), "ExpandBackward", {&input},
                              [](const Needs&) { return [](const Tensor& g) { return g; }; });
    case Derivation::Kind::copy:
      return autograd::record(std::move(output), "CopyBackward", {&input}, [](const Needs&) {
        return [](const Tensor& g, const OpNode& node) { return g.to(node.input_info[0].device); };
      });
  }
  return output;
}

}  // namespace kiln::detail
