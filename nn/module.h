// Module: the base of every layer and model. It owns an ordered registry of parameters, buffers
// and child modules, from which come dotted names ("h.0.attn.c_attn.weight"), train/eval, to(),
// zero_grad and state_dict/load_state_dict. Modules are held by std::shared_ptr (never copied).
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/profiler/profiler.h>
#include <kiln/core/tensor.h>

namespace kiln::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Note [Module registry order]
/// Names and orders follow torch.nn.Module: named_parameters() lists a module's own parameters
/// (in registration order) before its children's, depth first; state_dict() lists, module by
/// module, its own parameters, then its own buffers, then each child's entries. A tensor shared by
/// two modules (tied weights) appears once in named_parameters() but under both names in
/// state_dict(), so optimizers step it once and checkpoints round-trip both names.
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The type name printed by operator<< ("Linear"), and its configuration ("in_features=5, ...").
  virtual std::string name() const { return "Module"; }
  virtual std::string extra_repr() const { return ""; }  ///< what print() shows in Name(...)

  /// Registration. Names are non-empty, contain no '.', and are unique among this module's
  /// parameters, buffers and children. Each returns what it registered (the same handle).
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);  ///< state that is not trained (BatchNorm stats)
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    register_child(name, module);
    return module;
  }

  /// Recursive, with dotted names; see Note [Module registry order].
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;  ///< named_parameters() without the names
  NamedTensors named_buffers(bool recurse = true) const;  ///< buffers, with dotted names
  std::vector<Tensor> buffers(bool recurse = true) const;  ///< named_buffers() without the names
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }  ///< direct children
  std::vector<std::shared_ptr<Module>> children() const;  ///< direct children, unnamed
  /// This module (named "") and every descendant, depth first.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();

  /// The parameter/buffer registered here under `name` (no dots); fails listing the known names.
  Tensor parameter(const std::string& name) const;
  Tensor buffer(const std::string& name) const;  ///< the same for a buffer

  /// Training flag (Dropout, BatchNorm read it), set on this module and every descendant.
  void train(bool on = true);
  void eval() { train(false); }  ///< train(false)
  bool is_training() const { return training_; }  ///< this module's flag

  /// Moves/casts every parameter and buffer, recursively. The data is swapped inside each tensor
  /// (Tensor::set_data, torch's `param.data = ...`), so every handle to a parameter -- the
  /// registry's, a layer's `weight` member, an optimizer's -- sees the move; requires_grad and
  /// hooks are kept and an existing .grad is moved/cast too. to(DType) casts floating tensors only
  /// (num_batches_tracked stays i64).
  void to(Device device);
  void to(DType dtype);  ///< floating tensors only
  void to(Device device, DType dtype);  ///< both

  /// Clears every parameter's .grad (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  /// Parameters and buffers by dotted name, detached (sharing storage with the model).
  NamedTensors state_dict() const;
  /// Copies values into the model in place. Every problem -- missing keys, unexpected keys (both
  /// only when strict), shape and dtype mismatches, duplicate or undefined entries -- is gathered
  /// and reported in one kiln::Error; nothing is copied unless all checks pass.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  void load_state_dict(const NamedTensors& state, bool strict = true);  ///< the same from a list

  /// Prints the tree: Name(extra_repr) with one indented "(child): ..." line per child.
  void print(std::ostream& os, int indent = 0) const;

  /// Forward hooks (torch's register_forward_pre_hook / register_forward_hook), run in registration
  /// order. Kiln's forward()s are not virtual and differ in signature, so the hooks run where the
  /// module is called through nn::call(module, args...) (torch's `module(args)`): GPT calls its
  /// blocks so and CifarCnn its conv groups, which is what lets FSDP wrap them (parallel/fsdp.h).
  using ForwardPreHook = std::function<void(Module&)>;
  using ForwardHook = std::function<void(Module&, const Tensor& output)>;
  void register_forward_pre_hook(ForwardPreHook hook) { forward_pre_hooks_.push_back(std::move(hook)); }  ///< runs before forward
  void register_forward_hook(ForwardHook hook) { forward_hooks_.push_back(std::move(hook)); }  ///< runs after, with the output
  void run_forward_pre_hooks() {
    for (auto& h : forward_pre_hooks_) h(*this);
  }
  void run_forward_hooks(const Tensor& output) {
    for (auto& h : forward_hooks_) h(*this, output);
  }

 private:
  void register_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* what) const;
  /// A kind of registered tensor: &Module::parameters_ or &Module::buffers_.
  using Entries = NamedTensors Module::*;
  /// Appends this module's entries of `kinds` (detached or not), then its children's, depth first,
  /// under dotted names starting with `prefix`.
  void collect(std::initializer_list<Entries> kinds, bool detach, const std::string& prefix, NamedTensors& out) const;
  /// named_parameters / named_buffers: this module's own, or every one once (tied tensors).
  NamedTensors named(Entries kind, bool recurse) const;
  template <class Fn>
  void for_each_module(const Fn& fn);

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::vector<ForwardPreHook> forward_pre_hooks_;
  std::vector<ForwardHook> forward_hooks_;
};

/// module.forward(args...) between the module's forward pre-hooks and forward hooks.
template <class M, class... Args>
Tensor call(M& module, Args&&... args) {
  module.run_forward_pre_hooks();
  Tensor out = module.forward(std::forward<Args>(args)...);
  module.run_forward_hooks(out);
  if (profiler::enabled()) [[unlikely]]
    profiler::record_memory_counters(out.defined() ? out.device() : Device::cpu());
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace kiln::nn
