// The backward-graph walk behind find_unused_parameters: depth-first over next_edges from the
// outputs' gradient edges, collecting the AccumulateGrad nodes it meets.
#include <kiln/parallel/graph_walk.h>

#include <unordered_map>
#include <unordered_set>

#include <kiln/autograd/meta.h>

namespace kiln::dist {

GraphWalk walk_backward_graph(const std::vector<Tensor>& outputs, const std::vector<Tensor>& params) {
  GraphWalk walk;
  std::vector<bool>& reachable = walk.reachable;
  reachable.assign(params.size(), false);
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> stack;
  std::vector<Edge> roots;  // holds the nodes alive (a leaf output's accumulator is otherwise weak)
  for (const Tensor& out : outputs) {
    if (!out.defined()) continue;
    roots.push_back(autograd::gradient_edge(out));
    const Edge& e = roots.back();
    if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  // Each parameter's accumulator, if one exists (created when a graph first uses the leaf, so after
  // the outputs' edges: an output may be a parameter itself).
  std::unordered_map<const Node*, size_t> index_of;
  for (size_t i = 0; i < params.size(); ++i) {
    AutogradMeta* m = autograd::meta(params[i]);
    if (!m) continue;
    if (auto acc = m->accumulator.lock()) index_of.emplace(acc.get(), i);
  }
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (auto it = index_of.find(node); it != index_of.end())
      reachable[it->second] = true;
    else if (!walk.has_checkpoint && node->name() == "CheckpointBackward")
      walk.has_checkpoint = true;
    for (const Edge& e : node->next_edges)
      if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  return walk;
}

}  // namespace kiln::dist
