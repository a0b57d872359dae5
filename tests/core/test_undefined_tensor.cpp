// Misuse of an undefined tensor (a default-constructed Tensor, or .grad() before any backward) is
// a kiln::ValueError naming the method or op, never a signal (Note [Undefined tensors] in
// core/tensor.h): every public Tensor method, and the differentiable ops with an undefined operand.
#include "test_util.h"

#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace kiln;

namespace {

// f must throw a ValueError whose message contains `names`.
void throws_naming(const std::string& what, const std::function<void()>& f, const std::string& names) {
  // names: the method the user called, or the accessor an inline one is made of (nbytes: numel).
  CAPTURE(what);
  try {
    f();
    FAIL_CHECK(what, ": no error");
  } catch (const ValueError& e) {
    CHECK_MESSAGE(std::string(e.what()).find(names) != std::string::npos, what, ": ", e.what());
  }
}

}  // namespace

TEST_CASE("every Tensor method on an undefined tensor throws a ValueError naming it") {
  Tensor u;
  const Tensor x = ones({2, 3});
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"shape", [&] { (void)u.shape(); }},
      {"strides", [&] { (void)u.strides(); }},
      {"dim", [&] { (void)u.dim(); }},
      {"size", [&] { (void)u.size(0); }},
      {"stride", [&] { (void)u.stride(0); }},
      {"numel", [&] { (void)u.numel(); }},
      {"offset", [&] { (void)u.offset(); }},
      {"dtype", [&] { (void)u.dtype(); }},
      {"device", [&] { (void)u.device(); }},
      {"element_size", [&] { (void)u.element_size(); }},
      {"nbytes", [&] { (void)u.nbytes(); }},
      {"is_contiguous", [&] { (void)u.is_contiguous(); }},
      {"storage", [&] { (void)u.storage(); }},
      {"data_ptr", [&] { (void)u.data_ptr(); }},
      {"data", [&] { (void)u.data<float>(); }},
      {"view", [&] { (void)u.view({6}); }},
      {"reshape", [&] { (void)u.reshape({6}); }},
      {"transpose", [&] { (void)u.transpose(0, 1); }},
      {"permute", [&] { (void)u.permute({1, 0}); }},
      {"t", [&] { (void)u.t(); }},
      {"slice", [&] { (void)u.slice(0, 0, 1); }},
      {"narrow", [&] { (void)u.narrow(0, 0, 1); }},
      {"select", [&] { (void)u.select(0, 0); }},
      {"expand", [&] { (void)u.expand({2, 3}); }},
      {"expand_as", [&] { (void)u.expand_as(x); }},
      {"expand_as(undefined)", [&] { (void)x.expand_as(u); }},
      {"squeeze", [&] { (void)u.squeeze(); }},
      {"squeeze", [&] { (void)u.squeeze(0); }},
      {"unsqueeze", [&] { (void)u.unsqueeze(0); }},
      {"flatten", [&] { (void)u.flatten(); }},
      {"as_strided", [&] { (void)u.as_strided({1}, {1}, 0); }},
      {"contiguous", [&] { (void)u.contiguous(); }},
      {"clone", [&] { (void)u.clone(); }},
      {"to", [&] { (void)u.to(DType::f64); }},
      {"to", [&] { (void)u.to(Device::cpu()); }},
      {"to", [&] { (void)u.to(Device::cpu(), DType::f64); }},
      {"copy_", [&] { (void)u.copy_(x); }},
      {"copy_", [&] { Tensor y = x.clone(); (void)y.copy_(u); }},
      {"fill_", [&] { (void)u.fill_(1.0); }},
      {"zero_", [&] { (void)u.zero_(); }},
      {"pin_memory", [&] { (void)u.pin_memory(); }},
      {"item", [&] { (void)u.item(); }},
      {"item", [&] { (void)u.item<float>(); }},
      {"to_vector", [&] { (void)u.to_vector<float>(); }},
      {"requires_grad_", [&] { (void)u.requires_grad_(); }},
      {"detach", [&] { (void)u.detach(); }},
      {"retain_grad", [&] { u.retain_grad(); }},
      {"backward", [&] { u.backward(); }},
      {"set_data", [&] { u.set_data(x); }},
      {"set_data", [&] { Tensor y = x.clone(); y.set_data(u); }},
      {"set_grad", [&] { u.set_grad(x); }},
  };
  // Inline methods made of others name the one that found the tensor undefined.
  const std::map<std::string, std::string> via = {{"nbytes", "numel"}, {"data", "dtype"}, {"zero_", "fill_"},
                                                  {"to_vector", "to_vector"}, {"set_grad", "shape"},
                                                  {"expand_as", "expand"}, {"expand_as(undefined)", "shape"}};
  for (const auto& [name, f] : calls) throws_naming(name, f, via.count(name) ? via.at(name) : name);
}

TEST_CASE("the queries a PyTorch user makes of an undefined tensor answer without an error") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK(u.impl() == nullptr);
  CHECK(u.is_same(Tensor()));
  CHECK_FALSE(u.is_pinned());
  CHECK_FALSE(u.is_sole_owner());
  CHECK(u.str() == "tensor(undefined)");
  CHECK_FALSE(u.requires_grad());
  CHECK(u.is_leaf());
  CHECK_FALSE(u.grad().defined());
  u.set_grad(Tensor());  // clearing nothing
  std::ostringstream os;
  os << u;
  CHECK(os.str() == "tensor(undefined)");
}

TEST_CASE("a parameter's .grad() before any backward is undefined, and using it is an error, not a crash") {
  Tensor w = ones({3}).requires_grad_();
  CHECK_FALSE(w.grad().defined());
  throws_naming("grad().item()", [&] { (void)w.grad().item(); }, "undefined");
  throws_naming("grad().numel()", [&] { (void)w.grad().numel(); }, "numel");
}

TEST_CASE("the differentiable ops with an undefined operand throw a ValueError") {
  Tensor u;
  const Tensor x = ones({2, 3}), w = ones({4, 3}), ids = zeros({2}, TensorOptions(DType::i64));
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"add", [&] { (void)add(u, x); }},
      {"add", [&] { (void)add(x, u); }},
      {"mul", [&] { (void)mul(u, 2.0); }},
      {"sub", [&] { (void)sub(u, x); }},
      {"div", [&] { (void)div(x, u); }},
      {"pow", [&] { (void)pow(u, 2.0); }},
      {"neg", [&] { (void)neg(u); }},
      {"exp", [&] { (void)exp(u); }},
      {"log", [&] { (void)log(u); }},
      {"relu", [&] { (void)relu(u); }},
      {"tanh", [&] { (void)tanh(u); }},
      {"gelu", [&] { (void)gelu(u); }},
      {"sum", [&] { (void)sum(u); }},
      {"mean", [&] { (void)mean(u, {0}); }},
      {"var", [&] { (void)var(u, {0}); }},
      {"amax", [&] { (void)amax(u, {0}); }},
      {"softmax", [&] { (void)softmax(u, 0); }},
      {"log_softmax", [&] { (void)log_softmax(u, 0); }},
      {"matmul", [&] { (void)matmul(u, w.t()); }},
      {"matmul", [&] { (void)matmul(x, u); }},
      {"linear", [&] { (void)linear(u, w); }},
      {"linear", [&] { (void)linear(x, u); }},
      {"layer_norm", [&] { (void)layer_norm(u, {3}); }},
      {"cross_entropy", [&] { (void)cross_entropy(u, ids); }},
      {"cross_entropy", [&] { (void)cross_entropy(x, u); }},
      {"embedding", [&] { (void)embedding(u, ids); }},
      {"embedding", [&] { (void)embedding(w, u); }},
      {"cat", [&] { (void)cat({x, u}, 0); }},
      {"where", [&] { (void)where(u, x, x); }},
      {"masked_fill", [&] { (void)masked_fill(x, u, 0.0); }},
      {"mse_loss", [&] { (void)mse_loss(u, x); }},
      {"scaled_dot_product_attention", [&] { (void)scaled_dot_product_attention(u, u, u); }},
      {"triu", [&] { (void)triu(u); }},
  };
  for (const auto& [name, f] : calls) throws_naming(name, f, "undefined");
}
