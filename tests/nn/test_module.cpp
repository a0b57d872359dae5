// Module infrastructure: registry order and dotted names, name validation, train/eval, zero_grad,
// to(dtype), state_dict round trips, load_state_dict error reporting (every problem in one
// message, model untouched) and safetensors weight files. Uses small modules defined here.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>

#include <unistd.h>

#include "test_util.h"

using namespace kiln;
using test::names;
using kiln::test::values;

namespace {

// y = x * w + b, with a floating and an integer buffer.
struct Affine : nn::Module {
  explicit Affine(int64_t n, double fill = 1.0) {
    w = register_parameter("w", full({n}, fill));
    b = register_parameter("b", zeros({n}));
    stat = register_buffer("stat", zeros({n}));
    count = register_buffer("count", zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) { return x * w + b; }
  std::string name() const override { return "Affine"; }
  Tensor w, b, stat, count;
};

struct Block : nn::Module {
  Block() {
    attn = register_module("attn", std::make_shared<Affine>(3, 2.0));
    mlp = register_module("mlp", std::make_shared<Affine>(3, 3.0));
  }
  Tensor forward(const Tensor& x) { return mlp->forward(attn->forward(x)); }
  std::string name() const override { return "Block"; }
  std::shared_ptr<Affine> attn, mlp;
};

// A parameter of its own, then a ModuleList of two blocks: "scale", "h.0.attn.w", ...
struct Net : nn::Module {
  Net() {
    h = register_module("h", std::make_shared<nn::ModuleList>());
    scale = register_parameter("scale", full({3}, 0.5));
    h->push_back(std::make_shared<Block>());
    h->push_back(std::make_shared<Block>());
  }
  Tensor forward(const Tensor& x) {
    Tensor y = x * scale;
    for (size_t i = 0; i < h->size(); ++i) y = h->at<Block>(i)->forward(y);
    return y;
  }
  std::string name() const override { return "Net"; }
  std::shared_ptr<nn::ModuleList> h;
  Tensor scale;
};

// Writes distinct values into every floating parameter/buffer so copies are observable.
void scramble(nn::Module& m, double base) {
  NoGradGuard g;
  double v = base;
  for (auto& [n, t] : m.state_dict()) {
    Tensor dst = t;
    dst.fill_(v);
    v += 1.0;
  }
}

std::vector<std::vector<double>> snapshot(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& [n, t] : m.state_dict()) out.push_back(values(t));
  return out;
}

}  // namespace

TEST_CASE("named_parameters, named_buffers and state_dict follow torch's order and dotted names") {
  auto net = std::make_shared<Net>();
  std::vector<std::string> params = {"scale", "h.0.attn.w", "h.0.attn.b", "h.0.mlp.w", "h.0.mlp.b",
                                     "h.1.attn.w", "h.1.attn.b", "h.1.mlp.w", "h.1.mlp.b"};
  CHECK(names(net->named_parameters()) == params);
  CHECK(net->parameters().size() == params.size());
  CHECK(names(net->named_parameters(false)) == std::vector<std::string>{"scale"});
  CHECK(names(net->named_buffers()) == std::vector<std::string>{"h.0.attn.stat", "h.0.attn.count", "h.0.mlp.stat",
                                                                "h.0.mlp.count", "h.1.attn.stat", "h.1.attn.count",
                                                                "h.1.mlp.stat", "h.1.mlp.count"});
  CHECK(names(net->state_dict()) ==
        std::vector<std::string>{"scale", "h.0.attn.w", "h.0.attn.b", "h.0.attn.stat", "h.0.attn.count",
                                 "h.0.mlp.w", "h.0.mlp.b", "h.0.mlp.stat", "h.0.mlp.count", "h.1.attn.w",
                                 "h.1.attn.b", "h.1.attn.stat", "h.1.attn.count", "h.1.mlp.w", "h.1.mlp.b",
                                 "h.1.mlp.stat", "h.1.mlp.count"});
  // The registry hands back the handles the module holds.
  CHECK(net->named_parameters()[1].second.is_same(net->h->at<Block>(0)->attn->w));
  CHECK(net->scale.requires_grad());
  CHECK_FALSE(net->h->at<Block>(0)->attn->stat.requires_grad());

  auto children = net->named_children();
  REQUIRE(children.size() == 1);
  CHECK(children[0].first == "h");
  std::vector<std::string> mods;
  for (auto& [n, m] : net->named_modules()) mods.push_back(n + ":" + m->name());
  CHECK(mods == std::vector<std::string>{":Net", "h:ModuleList", "h.0:Block", "h.0.attn:Affine", "h.0.mlp:Affine",
                                         "h.1:Block", "h.1.attn:Affine", "h.1.mlp:Affine"});
  CHECK(net->h->at<Block>(1)->mlp->parameter("w").is_same(net->h->at<Block>(1)->mlp->w));
  CHECK_ERROR_CONTAINS(net->parameter("nope"), "Net", "nope", "scale");
  CHECK_ERROR_CONTAINS(net->h->at<Affine>(0), "ModuleList", "element 0", "Block");
}

TEST_CASE("registration rejects duplicate, dotted and empty names") {
  Affine m(2);
  CHECK_ERROR_CONTAINS(m.register_parameter("w", zeros({2})), "Affine", "\"w\"", "already used");
  CHECK_ERROR_CONTAINS(m.register_buffer("b", zeros({2})), "\"b\"", "already used");
  CHECK_ERROR_CONTAINS(m.register_module("stat", std::make_shared<Affine>(2)), "\"stat\"", "already used");
  CHECK_ERROR_CONTAINS(m.register_parameter("a.b", zeros({2})), "a.b", "'.'");
  CHECK_ERROR_CONTAINS(m.register_module("x.y", std::make_shared<Affine>(2)), "x.y", "'.'");
  CHECK_ERROR_CONTAINS(m.register_buffer("", zeros({2})), "empty");
  Tensor leaf = ones({2});
  leaf.requires_grad_();
  CHECK_ERROR_CONTAINS(m.register_parameter("derived", leaf * 2.0), "derived", "detach");
  CHECK(names(m.named_parameters()) == std::vector<std::string>{"w", "b"});  // failures registered nothing
}

TEST_CASE("train/eval reach every descendant") {
  auto net = std::make_shared<Net>();
  CHECK(net->is_training());
  net->eval();
  for (auto& [n, m] : net->named_modules()) CHECK_MESSAGE(!m->is_training(), n);
  net->h->at<Block>(1)->train();
  CHECK(net->h->at<Block>(1)->mlp->is_training());
  CHECK_FALSE(net->h->at<Block>(0)->mlp->is_training());
  net->train();
  for (auto& [n, m] : net->named_modules()) CHECK_MESSAGE(m->is_training(), n);
}

TEST_CASE("zero_grad zeroes or clears every parameter's grad") {
  auto net = std::make_shared<Net>();
  Tensor y = net->forward(ones({3}));
  y.backward(ones({3}));
  // scale's grad: d/dscale of x*scale*2*3*2*3 summed with x=1 -> 36 per element.
  test::check_close(net->scale.grad(), {36, 36, 36}, 1e-6, 0, "scale grad");
  for (const Tensor& p : net->parameters()) CHECK(p.grad().defined());
  net->zero_grad(false);
  for (const Tensor& p : net->parameters()) {
    REQUIRE(p.grad().defined());
    for (double v : values(p.grad())) CHECK(v == 0.0);
  }
  net->zero_grad();
  for (const Tensor& p : net->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("to(dtype) casts floating tensors in place, keeping handles, requires_grad and grads") {
  auto net = std::make_shared<Net>();
  Tensor w = net->h->at<Block>(0)->attn->w;  // a handle taken before the cast
  net->forward(ones({3})).backward(ones({3}));
  net->to(DType::f64);
  for (const auto& [n, t] : net->named_parameters()) {
    CHECK_MESSAGE(t.dtype() == DType::f64, n);
    CHECK_MESSAGE(t.requires_grad(), n);
    CHECK_MESSAGE(t.grad().dtype() == DType::f64, n);
  }
  CHECK(w.dtype() == DType::f64);
  CHECK(values(w) == std::vector<double>{2, 2, 2});
  CHECK(net->h->at<Block>(0)->attn->stat.dtype() == DType::f64);
  CHECK(net->h->at<Block>(0)->attn->count.dtype() == DType::i64);  // integer buffers keep their dtype
  Tensor y = net->forward(ones({3}, DType::f64));
  CHECK(y.dtype() == DType::f64);
  test::check_close(y, {18, 18, 18}, 1e-12, 0, "forward after cast");
  net->to(Device::cpu());  // a no-op move keeps everything
  CHECK(w.dtype() == DType::f64);
  CHECK_ERROR_CONTAINS(net->to(DType::i32), "Net", "floating");
}

TEST_CASE("to(dtype) keeps each parameter the same tensor: handles, autograd state and hooks survive") {
  auto net = std::make_shared<Affine>(3, 2.0);
  Tensor w = net->parameters()[0];  // as an optimizer or DDP holds it
  const AutogradMeta* meta = w.impl()->autograd_meta();
  std::vector<DType> seen;  // the gradient dtype each hook run saw
  autograd::register_hook(w, [&](const Tensor& g) {
    seen.push_back(g.dtype());
    return Tensor();
  });
  int post_calls = 0;
  autograd::register_post_accumulate_grad_hook(w, [&](const Tensor& p) {
    ++post_calls;
    CHECK(p.is_same(w));
  });
  net->to(DType::f64);
  CHECK(w.dtype() == DType::f64);
  CHECK(w.is_same(net->parameters()[0]));
  CHECK(w.is_same(net->w));
  CHECK(w.impl()->autograd_meta() == meta);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  net->forward(ones({3}, DType::f64)).backward(ones({3}, DType::f64));
  CHECK(seen == std::vector<DType>{DType::f64});
  CHECK(post_calls == 1);
  CHECK(w.grad().dtype() == DType::f64);
  CHECK(values(w.grad()) == std::vector<double>{1, 1, 1});
}

TEST_CASE("state_dict is detached, shares storage, and round-trips through load_state_dict") {
  auto a = std::make_shared<Net>();
  auto b = std::make_shared<Net>();
  scramble(*a, 10.0);
  for (const auto& [n, t] : a->state_dict()) CHECK_MESSAGE(!t.requires_grad(), n);
  CHECK(a->state_dict()[0].second.storage() == a->scale.storage());
  CHECK(snapshot(*a) != snapshot(*b));

  b->load_state_dict(a->state_dict());
  CHECK(snapshot(*a) == snapshot(*b));
  CHECK(b->scale.requires_grad());
  CHECK(b->scale.is_leaf());
  CHECK(values(b->h->at<Block>(1)->mlp->b)[0] == values(a->h->at<Block>(1)->mlp->b)[0]);

  // The map overload and non-strict loading of a subset.
  auto c = std::make_shared<Net>();
  std::map<std::string, Tensor> subset{{"scale", full({3}, 7.0)}};
  c->load_state_dict(subset, /*strict=*/false);
  CHECK(values(c->scale) == std::vector<double>{7, 7, 7});
  CHECK(values(c->h->at<Block>(0)->attn->w) == std::vector<double>{2, 2, 2});
}

TEST_CASE("load_state_dict reports every problem in one error and leaves the model untouched") {
  auto net = std::make_shared<Net>();
  scramble(*net, 1.0);
  auto before = snapshot(*net);

  nn::NamedTensors sd = net->state_dict();
  nn::NamedTensors bad;
  for (auto& [n, t] : sd) {
    if (n == "h.0.mlp.b" || n == "h.1.attn.stat") continue;  // missing
    if (n == "h.0.attn.w") {
      bad.emplace_back(n, full({4}, 9.0));  // shape mismatch
    } else if (n == "h.1.mlp.w") {
      bad.emplace_back(n, full({3}, 9.0, DType::f64));  // dtype mismatch
    } else {
      bad.emplace_back(n, full(t.shape(), 99.0, t.dtype()));  // valid: must not be copied either
    }
  }
  bad.emplace_back("h.2.attn.w", zeros({3}));  // unexpected
  bad.emplace_back("extra", zeros({1}));       // unexpected
  bad.emplace_back("scale", zeros({3}));       // duplicate

  CHECK_ERROR_CONTAINS(net->load_state_dict(bad), "Net", "nothing was loaded", "missing keys (2)", "h.0.mlp.b",
                       "h.1.attn.stat", "unexpected keys (2)", "h.2.attn.w", "extra", "h.0.attn.w", "[4]", "[3]",
                       "h.1.mlp.w", "f64", "duplicate keys", "scale");
  CHECK(snapshot(*net) == before);

  // Not strict: missing/unexpected keys are fine, mismatches still fail.
  CHECK_ERROR_CONTAINS(net->load_state_dict(bad, false), "h.0.attn.w", "h.1.mlp.w");
  CHECK(snapshot(*net) == before);
  std::string msg;
  try {
    net->load_state_dict(bad, false);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("missing") == std::string::npos);
  CHECK(msg.find("unexpected") == std::string::npos);
}

TEST_CASE("tied parameters are listed once by named_parameters and under both names by state_dict") {
  struct Shared : nn::Module {
    explicit Shared(const Tensor& w) { register_parameter("w", w); }
  };
  Tensor w = ones({2});
  auto outer = std::make_shared<nn::ModuleList>();
  outer->push_back(std::make_shared<Shared>(w));
  outer->push_back(std::make_shared<Shared>(w));
  CHECK(names(outer->named_parameters()) == std::vector<std::string>{"0.w"});
  CHECK(names(outer->state_dict()) == std::vector<std::string>{"0.w", "1.w"});
}

TEST_CASE("Sequential chains forward and prints the module tree") {
  nn::Sequential seq(std::make_shared<Affine>(2, 2.0), std::make_shared<Affine>(2, 3.0));
  seq.push_back(std::make_shared<Block>());
  CHECK(seq.size() == 3);
  CHECK(seq[2]->name() == "Block");
  CHECK_ERROR_CONTAINS(seq[3], "Sequential", "index 3", "3 modules");
  CHECK(names(seq.named_parameters())[4] == "2.attn.w");
  // 1 * 2, then Block's * 2 * 3.
  nn::Sequential seq3(std::make_shared<Affine>(3, 2.0), std::make_shared<Block>());
  test::check_close(seq3.forward(ones({3})), {12, 12, 12}, 1e-6, 0, "Sequential forward");
  CHECK(nn::Sequential().forward(ones({2})).numel() == 2);

  std::ostringstream os;
  os << seq3;
  CHECK(os.str() == "Sequential(\n  (0): Affine()\n  (1): Block(\n    (attn): Affine()\n    (mlp): Affine()\n  )\n)");
}

TEST_CASE("save_weights / load_weights through a safetensors file") {
  auto path = (std::filesystem::temp_directory_path() /
               ("kiln_nn_weights_" + std::to_string(::getpid()) + ".safetensors")).string();
  auto a = std::make_shared<Net>();
  scramble(*a, 3.0);
  nn::save_weights(*a, path, {{"format", "pt"}});
  SafetensorsFile file = load_safetensors(path);
  CHECK(names(file.tensors) == names(a->state_dict()));
  CHECK(file.metadata.at("format") == "pt");

  auto b = std::make_shared<Net>();
  nn::load_weights(*b, path);
  CHECK(snapshot(*a) == snapshot(*b));

  // A file for another model fails naming the path and the problems; b keeps its values.
  Affine other(5);
  nn::save_weights(other, path);
  CHECK_ERROR_CONTAINS(nn::load_weights(*b, path), path.c_str(), "missing keys (17)", "scale",
                       "unexpected keys (4)");
  CHECK(snapshot(*a) == snapshot(*b));
  std::filesystem::remove(path);
}
