// Backward engine. Ready nodes run newest-first (highest sequence number), which for a
// layered model means last layer first: the order DDP's buckets expect gradients to arrive in.
#include <kiln/autograd/engine.h>

#include <queue>
#include <unordered_map>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/profiler/profiler.h>

namespace kiln::autograd {

namespace {

struct NodeState {
  int dependencies = 0;           // edges into this node not yet delivered
  std::vector<Tensor> inputs;     // gradient per output slot, summed over uses
};

void accumulate(std::vector<Tensor>& slots, uint32_t slot, const Tensor& g) {
  if (!g.defined()) return;
  if (slots.size() <= slot) slots.resize(slot + 1);
  slots[slot] = slots[slot].defined() ? ops::add(slots[slot], g) : g;
}

struct ByNewest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

thread_local int backward_depth = 0;

struct BackwardDepth {
  BackwardDepth() { ++backward_depth; }
  ~BackwardDepth() { --backward_depth; }
};

}  // namespace

bool in_backward() { return backward_depth > 0; }

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  KILN_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " tensors but ", grads.size(), " gradients");
  BackwardDepth depth;
  NoGradGuard no_grad;  // backward formulas are not recorded (no double backward)
  profiler::Range whole("backward", profiler::Category::step);

  std::unordered_map<Node*, NodeState> state;
  std::vector<std::shared_ptr<Node>> keep_alive;
  std::vector<std::pair<Edge, Tensor>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    check_defined(r, "backward");
    Edge e = gradient_edge(r);
    KILN_CHECK(e.valid(), "backward: the tensor of shape ", r.shape(),
               " does not require grad and has no grad_fn (did a parameter miss requires_grad_(), or was the "
               "loss computed under NoGradGuard?)");
    Tensor g = grads[i];
    if (!g.defined()) {
      KILN_CHECK(r.numel() == 1, "backward: a gradient can be implied only for a one-element output; got shape ",
                 r.shape(), " (pass gradient= of the same shape)");
      g = ones(r.shape(), TensorOptions(r.dtype()).device(r.device()));
    }
    KILN_CHECK(g.shape() == r.shape(), "backward: gradient of shape ", g.shape(), " for an output of shape ",
               r.shape());
    starts.emplace_back(e, g);
  }

  // Count dependencies: every edge into a node from a node reachable from the roots.
  std::vector<Node*> stack;
  for (auto& [e, g] : starts)
    if (state.emplace(e.fn.get(), NodeState{}).second) {
      stack.push_back(e.fn.get());
      keep_alive.push_back(e.fn);
    }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& next : n->next_edges) {
      if (!next.valid()) continue;
      auto [it, fresh] = state.emplace(next.fn.get(), NodeState{});
      ++it->second.dependencies;
      if (fresh) {
        stack.push_back(next.fn.get());
        keep_alive.push_back(next.fn);
      }
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, ByNewest> ready;
  for (auto& [e, g] : starts) accumulate(state[e.fn.get()].inputs, e.input_nr, g);
  for (auto& [node, st] : state)
    if (st.dependencies == 0) ready.push(node);

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    NodeState& st = state[n];
    st.inputs.resize(n->num_outputs());
    profiler::Range range(profiler::Category::backward, [n] { return n->name(); });
    std::vector<Tensor> out = n->run(std::move(st.inputs));
    if (!retain_graph) n->release();
    KILN_ASSERT(out.size() == n->next_edges.size() || out.empty(), n->name(), " returned ", out.size(),
                " gradients for ", n->next_edges.size(), " inputs");
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      NodeState& next = state[e.fn.get()];
      if (i < out.size()) accumulate(next.inputs, e.input_nr, out[i]);
      if (--next.dependencies == 0) ready.push(e.fn.get());
    }
  }
}

}  // namespace kiln::autograd
