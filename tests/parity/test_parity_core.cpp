// Parity with PyTorch 1.13 on the CPU: gen_core.py stores seeded inputs and torch's outputs in a
// safetensors file; each case here runs the same op in Kiln and compares shape, dtype and values.
// The two sides must list the same case names, so neither can silently drop one.
#include "test_util.h"

#include <filesystem>
#include <functional>
#include <map>

using namespace kiln;

namespace {

using Tensors = std::vector<Tensor>;

struct Case {
  std::function<Tensors(const Tensors&)> run;
  double rtol = 1e-5, atol = 1e-6;
};

Tensors one(Tensor t) { return {std::move(t)}; }

std::map<std::string, Case> kiln_cases() {
  auto unary = [](Tensor (*op)(const Tensor&)) { return Case{[op](const Tensors& in) { return one(op(in[0])); }}; };
  auto binary = [](Tensor (*op)(const Tensor&, const Tensor&)) {
    return Case{[op](const Tensors& in) { return one(op(in[0], in[1])); }};
  };
  auto exact = [](Case c) { c.rtol = 0; c.atol = 0; return c; };
  auto loose = [](Case c, double rtol, double atol) { c.rtol = rtol; c.atol = atol; return c; };
  std::map<std::string, Case> m;
  m["neg"] = unary(ops::neg);
  m["abs"] = unary(ops::abs);
  m["exp"] = unary(ops::exp);
  m["log"] = unary(ops::log);
  m["sqrt"] = unary(ops::sqrt);
  m["rsqrt"] = unary(ops::rsqrt);
  m["tanh"] = unary(ops::tanh);
  m["sigmoid"] = unary(ops::sigmoid);
  m["relu"] = unary(ops::relu);
  m["gelu_tanh"] = unary(ops::gelu_tanh);
  m["gelu_erf"] = unary(ops::gelu_erf);
  m["square"] = unary(ops::square);
  m["gelu_tanh_bf16"] = loose(unary(ops::gelu_tanh), 1e-2, 1e-2);  // one bf16 ulp
  m["exp_f16"] = loose(unary(ops::exp), 1e-3, 1e-4);
  m["add"] = binary(ops::add);
  m["sub"] = binary(ops::sub);
  m["mul"] = binary(ops::mul);
  m["div"] = binary(ops::div);
  m["pow"] = binary(ops::pow);
  m["maximum"] = binary(ops::maximum);
  m["minimum"] = binary(ops::minimum);
  m["add_bf16"] = loose(binary(ops::add), 1e-2, 1e-2);
  m["add_int"] = exact(binary(ops::add));
  m["div_int"] = binary(ops::div);
  m["add_scalar"] = {[](const Tensors& in) { return one(ops::add(in[0], 1.5)); }};
  m["rsub_scalar"] = {[](const Tensors& in) { return one(ops::rsub(in[0], 1.5)); }};
  m["mul_scalar"] = {[](const Tensors& in) { return one(ops::mul(in[0], -2.0)); }};
  m["div_scalar"] = {[](const Tensors& in) { return one(ops::div(in[0], 4.0)); }};
  m["pow_scalar"] = {[](const Tensors& in) { return one(ops::pow(in[0], 1.7)); }};
  m["eq"] = exact(binary(ops::eq));
  m["lt"] = exact(binary(ops::lt));
  m["ge"] = exact(binary(ops::ge));
  m["where"] = exact({[](const Tensors& in) { return one(ops::where(in[0], in[1], in[2])); }});
  m["masked_fill"] = exact({[](const Tensors& in) { return one(ops::masked_fill(in[0], in[1], -1e9)); }});
  m["to_bf16"] = exact({[](const Tensors& in) { return one(in[0].to(DType::bf16)); }});
  m["to_f16"] = exact({[](const Tensors& in) { return one(in[0].to(DType::f16)); }});
  m["to_i64"] = exact({[](const Tensors& in) { return one(in[0].to(DType::i64)); }});
  m["to_bool"] = exact({[](const Tensors& in) { return one(in[0].to(DType::b8)); }});

  m["sum_dims"] = {[](const Tensors& in) { return one(ops::sum(in[0], {0, 2})); }};
  m["sum_all"] = {[](const Tensors& in) { return one(ops::sum(in[0])); }};
  m["mean_keepdim"] = {[](const Tensors& in) { return one(ops::mean(in[0], {1}, true)); }};
  m["amax"] = exact({[](const Tensors& in) { return one(ops::amax(in[0], {-1})); }});
  m["max_dim"] = exact({[](const Tensors& in) {
    auto r = ops::max(in[0], 1);
    return Tensors{r.values, r.indices};
  }});
  m["argmax"] = exact({[](const Tensors& in) { return one(ops::argmax(in[0], 2)); }});
  m["var"] = {[](const Tensors& in) { return one(ops::var(in[0], {1})); }};
  m["sum_int"] = exact({[](const Tensors& in) { return one(ops::sum(in[0], {0})); }});
  m["sum_bf16"] = loose({[](const Tensors& in) { return one(ops::sum(in[0], {1})); }}, 1e-2, 1e-2);

  m["softmax"] = {[](const Tensors& in) { return one(ops::softmax(in[0], -1)); }};
  m["softmax_dim0"] = {[](const Tensors& in) { return one(ops::softmax(in[0], 0)); }};
  m["log_softmax"] = {[](const Tensors& in) { return one(ops::log_softmax(in[0], -1)); }};
  m["softmax_bf16"] = loose({[](const Tensors& in) { return one(ops::softmax(in[0], -1)); }}, 1e-2, 1e-3);
  m["layer_norm"] = loose({[](const Tensors& in) {
    auto r = ops::layer_norm(in[0], {16}, in[1], in[2], 1e-5);
    return Tensors{r.out, r.mean, r.rstd};
  }}, 1e-5, 1e-5);

  m["matmul"] = loose(binary(ops::matmul), 1e-5, 1e-5);
  m["matmul_t"] = loose({[](const Tensors& in) { return one(ops::matmul(in[0].t(), in[1])); }}, 1e-5, 1e-5);
  m["bmm"] = loose(binary(ops::bmm), 1e-5, 1e-5);
  m["matmul_bcast"] = loose(binary(ops::matmul), 1e-5, 1e-5);
  m["linear"] = loose({[](const Tensors& in) { return one(ops::linear(in[0], in[1], in[2])); }}, 1e-5, 1e-5);
  m["matmul_bf16"] = loose(binary(ops::matmul), 1e-2, 1e-2);

  auto conv_opts = ops::Conv2dOptions().stride(2).padding(1);
  m["conv2d"] = loose({[=](const Tensors& in) { return one(ops::conv2d(in[0], in[1], in[2], conv_opts)); }}, 1e-5, 1e-5);
  m["conv2d_groups"] = loose({[](const Tensors& in) {
    return one(ops::conv2d(in[0], in[1], Tensor(), ops::Conv2dOptions().padding(2).dilation(2).groups(2)));
  }}, 1e-5, 1e-5);
  m["conv2d_backward"] = loose({[=](const Tensors& in) {
    return Tensors{ops::conv2d_backward_input(in[2], in[1], in[0].shape(), conv_opts),
                   ops::conv2d_backward_weight(in[2], in[0], in[1].shape(), conv_opts)};
  }}, 1e-5, 1e-5);
  m["max_pool2d"] = exact({[](const Tensors& in) {
    auto r = ops::max_pool2d(in[0], 3, 2, 1);
    return Tensors{r.out, r.indices};
  }});
  m["avg_pool2d"] = {[](const Tensors& in) { return one(ops::avg_pool2d(in[0], 2, 2, 0)); }};
  m["adaptive_avg_pool2d"] = {[](const Tensors& in) { return one(ops::adaptive_avg_pool2d(in[0], {3, 2})); }};

  m["index_select"] = exact({[](const Tensors& in) { return one(ops::index_select(in[0], 0, in[1])); }});
  m["gather"] = exact({[](const Tensors& in) { return one(ops::gather(in[0], 1, in[1])); }});
  m["scatter_add"] = {[](const Tensors& in) { return one(ops::scatter_add(in[0], 1, in[1], in[2])); }};
  m["embedding"] = exact({[](const Tensors& in) { return one(ops::embedding(in[0], in[1])); }});
  m["embedding_backward"] = {[](const Tensors& in) { return one(ops::embedding_backward(in[0], in[1], 10)); }};
  m["cat"] = exact({[](const Tensors& in) { return one(ops::cat({in[0], in[1]}, 1)); }});
  m["stack"] = exact({[](const Tensors& in) { return one(ops::stack({in[0], in[1]}, 1)); }});
  m["split"] = exact({[](const Tensors& in) { return ops::split(in[0], std::vector<int64_t>{2, 4, 1}, 0); }});
  m["chunk"] = exact({[](const Tensors& in) { return ops::chunk(in[0], 3, 0); }});
  m["triu"] = exact({[](const Tensors& in) { return one(ops::triu(in[0], 1)); }});
  m["tril"] = exact({[](const Tensors& in) { return one(ops::tril(in[0], -1)); }});
  return m;
}

std::string oracle_path() {
  const char* dir = std::getenv("KILN_TEST_DATA");
  return std::string(dir ? dir : ".") + "/parity_core.safetensors";
}

}  // namespace

TEST_CASE("core ops match PyTorch") {
  std::string path = oracle_path();
  if (!std::filesystem::exists(path)) {
    std::printf("SKIPPED: %s is missing (no python3 with torch to generate it)\n", path.c_str());
    std::exit(77);
  }
  SafetensorsFile file = load_safetensors(path);
  // Group "<case>.in<k>" / "<case>.out<k>" entries.
  std::map<std::string, std::map<int, Tensor>> inputs, outputs;
  for (const auto& [name, t] : file.tensors) {
    auto dot = name.rfind('.');
    REQUIRE(dot != std::string::npos);
    std::string cname = name.substr(0, dot), slot = name.substr(dot + 1);
    bool is_in = slot.rfind("in", 0) == 0;
    int k = std::stoi(slot.substr(is_in ? 2 : 3));
    (is_in ? inputs : outputs)[cname][k] = t;
  }
  auto cases = kiln_cases();
  for (const auto& [cname, outs] : outputs) CHECK_MESSAGE(cases.count(cname), "oracle case ", cname, " has no Kiln side");
  for (const auto& [cname, c] : cases) {
    CAPTURE(cname);
    REQUIRE_MESSAGE(outputs.count(cname), "Kiln case ", cname, " is missing from the oracle");
    Tensors in;
    for (auto& [k, t] : inputs[cname]) in.push_back(t);
    Tensors got = c.run(in);
    REQUIRE(got.size() == outputs[cname].size());
    for (auto& [k, want] : outputs[cname]) {
      std::string what = cname + ".out" + std::to_string(k);
      CHECK_MESSAGE(got[k].shape() == want.shape(), what, ": shape ", got[k].shape(), " vs torch ", want.shape());
      CHECK_MESSAGE(got[k].dtype() == want.dtype(), what, ": dtype ", got[k].dtype(), " vs torch ", want.dtype());
      if (got[k].shape() == want.shape()) test::check_close(got[k], test::values(want), c.rtol, c.atol, what);
    }
  }
  MESSAGE("compared ", cases.size(), " cases with torch ", file.metadata["torch"]);
}
