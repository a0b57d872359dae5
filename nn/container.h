// Containers: Sequential chains single-input modules (children "0", "1", ...); ModuleList holds
// modules for the owner to call in its own forward (GPT's blocks). Both register what they hold,
// so names, state_dict and train/eval reach inside.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/nn/module.h>

namespace kiln::nn {

/// A module whose forward takes and returns one tensor.
template <class M>
concept TensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

/// Chains single-input modules, each fed the previous one's output; children are named "0", "1", ...
class Sequential : public Module {
 public:
  Sequential() = default;
  template <TensorModule... Ms>
  explicit Sequential(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }

  template <TensorModule M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(steps_.size()), module);
    modules_.push_back(module);
    steps_.push_back([m = module.get()](const Tensor& x) { return Tensor(m->forward(x)); });
    return module;
  }

  /// x through every module in order (x itself when empty).
  Tensor forward(const Tensor& x);

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  std::string name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
  std::vector<std::function<Tensor(const Tensor&)>> steps_;
};

/// Holds modules (children "0", "1", ...) for the owner to call in its own forward.
class ModuleList : public Module {
 public:
  ModuleList() = default;

  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  /// The i-th module as its concrete type; fails when it is not an M.
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    KILN_CHECK(m != nullptr, "ModuleList: element ", i, " is a ", (*this)[i]->name(), ", not the requested type");
    return m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  std::string name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace kiln::nn
