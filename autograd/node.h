// The backward graph: a Node turns gradients w.r.t. its outputs into gradients w.r.t. its inputs,
// and its next_edges say where each input gradient goes (the input's own grad_fn, or the
// AccumulateGrad node of a leaf). Nodes hold only detached tensors, so the graph owns no cycles.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln {

class Node;

/// Where one input's gradient goes: slot `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;  ///< null: that input needs no gradient
  uint32_t input_nr = 0;     ///< which of fn's gradient slots receives it
  bool valid() const { return fn != nullptr; }
};

using GradHook = std::function<Tensor(const Tensor&)>;  ///< may return a replacement gradient

/// One node of the backward graph: turns the gradients of its outputs into those of its inputs and
/// sends each along its next edge.
class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(uint32_t num_outputs = 1);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// grads[i] is the gradient w.r.t. output i (undefined when nothing flowed into it). Returns one
  /// gradient per next_edge (undefined where not needed).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  /// Frees saved tensors once the node has run (unless retain_graph).
  virtual void release_saved() {}

  /// Runs apply() after the pre-hooks and the "already released" check.
  std::vector<Tensor> run(std::vector<Tensor>&& grads);
  virtual void release() {
    release_saved();
    released_ = true;
  }

  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
  uint32_t num_outputs() const { return num_outputs_; }
  uint64_t sequence_nr() const { return sequence_nr_; }

  std::vector<Edge> next_edges;
  std::vector<std::vector<GradHook>> pre_hooks;     ///< per output: tensor hooks of non-leaf outputs
  std::vector<std::vector<GradHook>> retain_hooks;  ///< per output: retain_grad, run after pre_hooks

 private:
  uint32_t num_outputs_;
  uint64_t sequence_nr_;
  bool released_ = false;
};

/// The sink of a leaf that requires grad: runs the leaf's tensor hooks, accumulates into .grad,
/// then fires its post-accumulate-grad hooks (the moment .grad is final for this backward pass).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf) : Node(1), leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  void release() override {}  ///< shared by every graph over this leaf: never spent
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;  ///< a strong handle: the leaf lives as long as a graph that uses it
};

}  // namespace kiln
