// Module registry, recursion (names, train/eval, to, zero_grad) and state_dict loading.
// load_state_dict validates the whole checkpoint before writing anything, so a failed load leaves
// the model exactly as it was.
#include <kiln/nn/module.h>

#include <set>
#include <sstream>
#include <unordered_set>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/factory.h>

namespace kiln::nn {

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string names_of(const NamedTensors& entries) {
  std::vector<std::string> names;
  for (const auto& [n, t] : entries) names.push_back(n);
  return join(names);
}

}  // namespace

void Module::check_new_name(const std::string& name, const char* what) const {
  KILN_CHECK(!name.empty(), this->name(), ": ", what, " name must not be empty");
  KILN_CHECK(name.find('.') == std::string::npos, this->name(), ": ", what, " name \"", name,
             "\" must not contain '.' (dots separate nested module names)");
  auto taken = [&](const auto& entries) {
    for (const auto& e : entries)
      if (e.first == name) return true;
    return false;
  };
  KILN_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), this->name(), ": cannot register ",
             what, " \"", name, "\": the name is already used by a parameter, buffer or submodule");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  KILN_CHECK(tensor.defined(), this->name(), ": parameter \"", name, "\" is an undefined tensor");
  KILN_CHECK(tensor.is_leaf(), this->name(), ": parameter \"", name, "\" (shape ", tensor.shape(),
             ") has autograd history; register a leaf (use detach())");
  tensor.requires_grad_(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "buffer");
  KILN_CHECK(tensor.defined(), this->name(), ": buffer \"", name, "\" is an undefined tensor");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "submodule");
  KILN_CHECK(module != nullptr, this->name(), ": submodule \"", name, "\" is null");
  KILN_CHECK(module.get() != this, this->name(), ": cannot register a module as its own child \"", name, "\"");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(std::initializer_list<Entries> kinds, bool detach, const std::string& prefix,
                     NamedTensors& out) const {
  for (Entries kind : kinds)
    for (const auto& [n, t] : this->*kind) out.emplace_back(prefix + n, detach ? t.detach() : t);
  for (const auto& [n, c] : children_) c->collect(kinds, detach, prefix + n + ".", out);
}

NamedTensors Module::named(Entries kind, bool recurse) const {
  if (!recurse) return this->*kind;
  NamedTensors all;
  collect({kind}, false, "", all);
  // Keeps the first name of each tensor (tied weights are listed once).
  std::unordered_set<const TensorImpl*> seen;
  NamedTensors out;
  for (auto& e : all)
    if (seen.insert(e.second.impl()).second) out.push_back(std::move(e));
  return out;
}

static std::vector<Tensor> tensors_of(const NamedTensors& entries) {
  std::vector<Tensor> out;
  for (const auto& [n, t] : entries) out.push_back(t);
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const { return named(&Module::parameters_, recurse); }
std::vector<Tensor> Module::parameters(bool recurse) const { return tensors_of(named_parameters(recurse)); }
NamedTensors Module::named_buffers(bool recurse) const { return named(&Module::buffers_, recurse); }
std::vector<Tensor> Module::buffers(bool recurse) const { return tensors_of(named_buffers(recurse)); }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::shared_ptr<Module> self = weak_from_this().lock();
  KILN_CHECK(self != nullptr, name(), ": named_modules() needs the module to be held by a std::shared_ptr");
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out{{"", self}};
  for (const auto& [n, c] : children_)
    for (auto& [cn, m] : c->named_modules()) out.emplace_back(cn.empty() ? n : n + "." + cn, m);
  return out;
}

Tensor Module::parameter(const std::string& name) const {
  for (const auto& [n, t] : parameters_)
    if (n == name) return t;
  KILN_FAIL(this->name(), " has no parameter \"", name, "\" (parameters: ", names_of(parameters_), ")");
  return Tensor();
}

Tensor Module::buffer(const std::string& name) const {
  for (const auto& [n, t] : buffers_)
    if (n == name) return t;
  KILN_FAIL(this->name(), " has no buffer \"", name, "\" (buffers: ", names_of(buffers_), ")");
  return Tensor();
}

template <class Fn>
void Module::for_each_module(const Fn& fn) {
  fn(*this);
  for (auto& [n, c] : children_) c->for_each_module(fn);
}

void Module::train(bool on) {
  for_each_module([on](Module& m) { m.training_ = on; });
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  auto move = [&](const Tensor& t) {
    t.set_data(t.detach().to(device));
    if (Tensor g = t.grad(); g.defined()) t.set_grad(g.to(device));
  };
  for_each_module([&](Module& m) {
    for (auto& [n, t] : m.parameters_) move(t);
    for (auto& [n, t] : m.buffers_) move(t);
  });
}

void Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), name(), ".to(", dtype, "): modules can only be cast to a floating dtype");
  NoGradGuard no_grad;
  auto cast = [&](const Tensor& t) {
    if (!is_floating(t.dtype())) return;
    t.set_data(t.detach().to(dtype));
    if (Tensor g = t.grad(); g.defined()) t.set_grad(g.to(dtype));
  };
  for_each_module([&](Module& m) {
    for (auto& [n, t] : m.parameters_) cast(t);
    for (auto& [n, t] : m.buffers_) cast(t);
  });
}

void Module::to(Device device, DType dtype) {
  to(device);
  to(dtype);
}

void Module::zero_grad(bool set_to_none) { autograd::zero_grad(parameters(), set_to_none); }

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect({&Module::parameters_, &Module::buffers_}, true, "", out);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  load_state_dict(NamedTensors(state.begin(), state.end()), strict);
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors own = state_dict();
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> duplicate, undefined, unexpected, missing, mismatched;
  for (const auto& [n, t] : state) {
    if (!given.emplace(n, &t).second) duplicate.push_back(n);
    if (!t.defined()) undefined.push_back(n);
  }
  std::set<std::string> own_names;
  for (const auto& [n, dst] : own) {
    own_names.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = *it->second;
    if (!src.defined()) continue;
    if (src.shape() != dst.shape() || src.dtype() != dst.dtype())
      mismatched.push_back(detail::str_cat(n, ": checkpoint ", src.dtype(), src.shape(), " vs model ", dst.dtype(),
                                           dst.shape()));
  }
  for (const auto& [n, t] : given)
    if (!own_names.count(n)) unexpected.push_back(n);

  std::ostringstream problems;
  auto report = [&](const char* what, const std::vector<std::string>& names) {
    if (!names.empty()) problems << "\n  " << what << " (" << names.size() << "): " << join(names);
  };
  if (strict) {
    report("missing keys", missing);
    report("unexpected keys", unexpected);
  }
  report("shape/dtype mismatches", mismatched);
  report("duplicate keys", duplicate);
  report("undefined tensors", undefined);
  KILN_CHECK(problems.str().empty(), "load_state_dict into ", name(), " failed; nothing was loaded:", problems.str());

  NoGradGuard no_grad;
  for (auto& [n, dst] : own) {
    auto it = given.find(n);
    if (it != given.end()) dst.copy_(*it->second);
  }
}

void Module::print(std::ostream& os, int indent) const {
  os << name() << "(" << extra_repr();
  if (children_.empty()) {
    os << ")";
    return;
  }
  os << "\n";
  std::string pad(indent + 2, ' ');
  for (const auto& [n, c] : children_) {
    os << pad << "(" << n << "): ";
    c->print(os, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  module.print(os);
  return os;
}

}  // namespace kiln::nn
