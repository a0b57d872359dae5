// Backward engine. Ready nodes run newest-first (highest sequence number), which for a
// layered model means last layer first: the order DDP's buckets expect gradients to arrive in.
//
// Note [Backward frees gradients]
// As in PyTorch's engine, a node's input buffer (the gradients w.r.t. its outputs, summed over
// uses) is taken out of the engine's state when the node runs and freed when it returns; the
// gradients it returns live only until they are added into the next nodes' buffers. So the live
// set during backward is: the saved activations of nodes not yet run, the gradients waiting at
// nodes not yet run, the parameters' .grad, and one node's transients; it does not grow with the
// number of nodes already run (tests/autograd/test_backward_memory.cpp).
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

void accumulate(std::vector<Tensor>& slots, uint32_t slot, Tensor g) {
  if (!g.defined()) return;
  if (slots.size() <= slot) slots.resize(slot + 1);
  slots[slot] = slots[slot].defined() ? ops::add(slots[slot], g) : std::move(g);
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
    // The node's gradient buffer leaves the map and dies with this iteration, and each output
    // gradient dies once delivered (Note [Backward frees gradients]).
    auto it = state.find(n);
    std::vector<Tensor> inputs = std::move(it->second.inputs);
    state.erase(it);
    inputs.resize(n->num_outputs());
    profiler::Range range(profiler::Category::backward, [n] { return n->name(); });
    std::vector<Tensor> out = n->run(std::move(inputs));
    inputs.clear();
    if (!retain_graph) n->release();
    if (profiler::enabled()) [[unlikely]] {
      // The memory counter track over the backward pass, one sample per node (on its device).
      Device device = Device::cpu();
      for (const Tensor& g : out)
        if (g.defined()) {
          device = g.device();
          break;
        }
      profiler::record_memory_counters(device);
    }
    KILN_ASSERT(out.size() == n->next_edges.size() || out.empty(), n->name(), " returned ", out.size(),
                " gradients for ", n->next_edges.size(), " inputs");
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      NodeState& next = state[e.fn.get()];
      if (i < out.size()) accumulate(next.inputs, e.input_nr, std::move(out[i]));
      if (--next.dependencies == 0) ready.push(e.fn.get());
    }
  }
}

}  // namespace kiln::autograd
