// Layers (Linear, Embedding, LayerNorm, activations, Dropout, losses, Sequential): forward values
// against plain loops written here, parameter names/shapes/init, gradients after backward, and
// the wrong-input-shape errors. Conv2d, BatchNorm2d and pooling: test_layers_conv.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "test_util.h"

using namespace kiln;
using test::at;
using test::names;
using test::values;

namespace {

void check_within(const Tensor& t, double bound, const char* what) {
  for (double v : values(t)) {
    CHECK_MESSAGE(std::fabs(v) <= bound, what, ": ", v, " outside +-", bound);
    if (std::fabs(v) > bound) return;
  }
}

}  // namespace

TEST_CASE("Linear: names, init, forward, backward, shape errors") {
  Generator gen(7);
  nn::Linear lin(nn::LinearOptions(5, 2).generator(gen));
  CHECK(names(lin.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(lin.weight.shape() == Shape{2, 5});
  CHECK(lin.bias.shape() == Shape{2});
  check_within(lin.weight, 1.0 / std::sqrt(5.0), "weight");
  check_within(lin.bias, 1.0 / std::sqrt(5.0), "bias");
  Generator gen2(7);
  nn::Linear same(nn::LinearOptions(5, 2).generator(gen2));
  CHECK(values(same.weight) == values(lin.weight));
  CHECK(nn::Linear(nn::LinearOptions(5, 2).bias(false)).named_parameters().size() == 1);

  Tensor x = test::random({2, 3, 5}, DType::f32, 1);
  Tensor y = lin.forward(x);
  REQUIRE(y.shape() == Shape{2, 3, 2});
  std::vector<double> ref;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t o = 0; o < 2; ++o) {
        double s = at(lin.bias, {o});
        for (int64_t k = 0; k < 5; ++k) s += at(x, {n, t, k}) * at(lin.weight, {o, k});
        ref.push_back(s);
      }
  test::check_close(y, ref, 1e-5, 1e-5, "Linear forward");

  y.backward(ones_like(y));
  REQUIRE(lin.weight.grad().defined());
  std::vector<double> gw;  // d(sum y)/dW[o][k] = sum over rows of x[.., k]
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t k = 0; k < 5; ++k) {
      double s = 0;
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t t = 0; t < 3; ++t) s += at(x, {n, t, k});
      gw.push_back(s);
    }
  test::check_close(lin.weight.grad(), gw, 1e-5, 1e-5, "Linear weight grad");
  test::check_close(lin.bias.grad(), {6, 6}, 1e-6, 0, "Linear bias grad");

  CHECK_ERROR_CONTAINS(lin.forward(zeros({3, 4})), "Linear(in_features=5)", "(..., 5)", "[3, 4]");
  CHECK_ERROR_CONTAINS(nn::Linear(0, 2), "in_features (0)");
  std::ostringstream os;
  os << lin;
  CHECK(os.str() == "Linear(in_features=5, out_features=2, bias=true)");
}

TEST_CASE("Embedding: N(0, 1) init, lookup, gradient rows, id dtype errors") {
  Generator gen(3);
  nn::Embedding big(nn::EmbeddingOptions(1000, 100).generator(gen));
  std::vector<double> v = values(big.weight);
  double mean = 0, sq = 0;
  for (double e : v) mean += e / double(v.size());
  for (double e : v) sq += (e - mean) * (e - mean) / double(v.size());
  CHECK(std::fabs(mean) < 0.02);
  CHECK(std::sqrt(sq) == doctest::Approx(1.0).epsilon(0.02));

  nn::Embedding emb(nn::EmbeddingOptions(10, 3).generator(gen));
  CHECK(names(emb.named_parameters()) == std::vector<std::string>{"weight"});
  Tensor ids = from_vector<int64_t>({1, 3, 1, 9}, {2, 2});
  Tensor y = emb.forward(ids);
  REQUIRE(y.shape() == Shape{2, 2, 3});
  std::vector<double> ref;
  for (int64_t id : {1, 3, 1, 9})
    for (int64_t c = 0; c < 3; ++c) ref.push_back(at(emb.weight, {id, c}));
  test::check_close(y, ref, 0, 0, "Embedding forward");

  y.backward(ones_like(y));
  std::vector<double> g(30, 0.0);
  for (int64_t id : {1, 3, 1, 9})
    for (int64_t c = 0; c < 3; ++c) g[id * 3 + c] += 1.0;
  test::check_close(emb.weight.grad(), g, 0, 0, "Embedding grad");
  CHECK_ERROR_CONTAINS(emb.forward(zeros({2, 2})), "Embedding(num_embeddings=10, embedding_dim=3)", "f32",
                       "[2, 2]");
}

TEST_CASE("LayerNorm: ones/zeros init, normalization over trailing dims, shape errors") {
  nn::LayerNorm ln(nn::LayerNormOptions({2, 3}).eps(1e-5));
  CHECK(names(ln.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(values(ln.weight) == std::vector<double>(6, 1.0));
  CHECK(values(ln.bias) == std::vector<double>(6, 0.0));
  test::randomize(ln.weight, 11);
  test::randomize(ln.bias, 12);

  Tensor x = test::random({4, 2, 3}, DType::f32, 2);
  Tensor y = ln.forward(x);
  std::vector<double> ref;
  for (int64_t n = 0; n < 4; ++n) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) mean += at(x, {n, i, j}) / 6.0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) var += std::pow(at(x, {n, i, j}) - mean, 2) / 6.0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        ref.push_back((at(x, {n, i, j}) - mean) / std::sqrt(var + 1e-5) * at(ln.weight, {i, j}) +
                      at(ln.bias, {i, j}));
  }
  test::check_close(y, ref, 1e-4, 1e-5, "LayerNorm forward");
  y.backward(ones_like(y));
  CHECK(ln.weight.grad().shape() == Shape{2, 3});
  CHECK(ln.bias.grad().defined());
  test::check_close(ln.bias.grad(), std::vector<double>(6, 4.0), 1e-6, 0, "LayerNorm bias grad");

  CHECK(nn::LayerNorm(nn::LayerNormOptions({3}).elementwise_affine(false)).named_parameters().empty());
  CHECK_ERROR_CONTAINS(ln.forward(zeros({4, 3, 2})), "LayerNorm(normalized_shape=[2, 3])", "[4, 3, 2]");
  CHECK_ERROR_CONTAINS(ln.forward(zeros({3})), "(..., [2, 3])", "got [3]");
  CHECK(nn::LayerNorm(4).forward(ones({4})).shape() == Shape{4});
}

TEST_CASE("GELU (exact and tanh) and ReLU match their formulas") {
  Tensor x = test::random({50}, DType::f64, 4, -4.0, 4.0);
  x.requires_grad_();
  std::vector<double> exact, approx, relu;
  for (double v : values(x)) {
    exact.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
    approx.push_back(0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v))));
    relu.push_back(v > 0 ? v : 0.0);
  }
  test::check_close(nn::GELU().forward(x), exact, 1e-10, 1e-12, "GELU");
  nn::GELU tanh_gelu(nn::GELUOptions().approximate(GeluApproximate::tanh));
  test::check_close(tanh_gelu.forward(x), approx, 1e-10, 1e-12, "GELU tanh");
  Tensor r = nn::ReLU().forward(x);
  test::check_close(r, relu, 0, 0, "ReLU");
  r.backward(ones_like(r));
  std::vector<double> step;
  for (double v : relu) step.push_back(v > 0 ? 1.0 : 0.0);
  test::check_close(x.grad(), step, 0, 0, "ReLU grad");
  CHECK(nn::ReLU().named_parameters().empty());
  std::ostringstream os;
  os << tanh_gelu;
  CHECK(os.str() == "GELU(approximate='tanh')");
}

TEST_CASE("Dropout: training masks from the seed, identity in eval") {
  Tensor x = full({100, 100}, 3.0);
  nn::Dropout d(nn::DropoutOptions(0.4).seed(9));
  Tensor y = d.forward(x);
  int64_t zeros_count = 0;
  bool scaled = true;
  for (double v : values(y)) {
    if (v == 0.0) ++zeros_count;
    else scaled = scaled && std::fabs(v - 3.0 / 0.6) < 1e-5;
  }
  CHECK(scaled);
  CHECK(double(zeros_count) / 1e4 == doctest::Approx(0.4).epsilon(0.05));

  nn::Dropout again(nn::DropoutOptions(0.4).seed(9));
  CHECK(values(again.forward(x)) == values(y));
  CHECK(values(d.forward(x)) != values(y));  // the owned generator advanced

  Generator g(5);
  nn::Dropout shared(nn::DropoutOptions(0.2).generator(g));
  uint64_t before = g.offset();
  shared.forward(x);
  CHECK(g.offset() > before);

  d.eval();
  CHECK(values(d.forward(x)) == values(x));
  CHECK(values(nn::Dropout(0.0).forward(x)) == values(x));
  CHECK_ERROR_CONTAINS(nn::Dropout(1.5), "Dropout", "1.5");
  CHECK_ERROR_CONTAINS(nn::Dropout(nn::DropoutOptions(0.1).seed(1).generator(g)), "either a generator or a seed");
}

TEST_CASE("CrossEntropyLoss and MSELoss against their formulas") {
  Tensor logits = test::random({4, 5}, DType::f32, 10);
  logits.requires_grad_();
  Tensor targets = from_vector<int64_t>({0, 4, 2, -100}, {4});
  double total = 0;
  for (int64_t n = 0; n < 3; ++n) {  // row 3 is ignored
    double mx = -1e30, z = 0;
    for (int64_t c = 0; c < 5; ++c) mx = std::max(mx, at(logits, {n, c}));
    for (int64_t c = 0; c < 5; ++c) z += std::exp(at(logits, {n, c}) - mx);
    const int64_t t = int64_t(at(targets, {n}));
    total += -(at(logits, {n, t}) - mx - std::log(z));
  }
  nn::CrossEntropyLoss ce;
  Tensor loss = ce.forward(logits, targets);
  test::check_close(loss, {total / 3.0}, 1e-5, 1e-6, "CrossEntropyLoss mean");
  nn::CrossEntropyLoss ce_sum(nn::CrossEntropyLossOptions().reduction(Reduction::sum));
  test::check_close(ce_sum.forward(logits, targets), {total}, 1e-5, 1e-6, "CrossEntropyLoss sum");
  loss.backward();
  REQUIRE(logits.grad().defined());
  for (double g : values(logits.grad().select(0, 3))) CHECK(g == 0.0);  // the ignored row
  CHECK_ERROR_CONTAINS(ce.forward(logits, from_vector<int64_t>({0, 1, 2}, {3})), "CrossEntropyLoss", "[4, 5]",
                       "[3]");
  CHECK_ERROR_CONTAINS(ce.forward(logits, zeros({4})), "CrossEntropyLoss", "integer", "f32");

  Tensor a = test::random({3, 4}, DType::f32, 11), b = test::random({3, 4}, DType::f32, 12);
  double sq = 0;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) sq += std::pow(at(a, {i, j}) - at(b, {i, j}), 2);
  test::check_close(nn::MSELoss().forward(a, b), {sq / 12.0}, 1e-5, 1e-6, "MSELoss mean");
  test::check_close(nn::MSELoss(nn::MSELossOptions().reduction(Reduction::sum)).forward(a, b), {sq}, 1e-5, 1e-6,
                    "MSELoss sum");
  CHECK_ERROR_CONTAINS(nn::MSELoss().forward(a, zeros({4, 3})), "MSELoss", "[3, 4]", "[4, 3]");
}

TEST_CASE("Sequential of real layers: names, forward = composition, backward reaches every parameter") {
  Generator gen(13);
  auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(nn::LinearOptions(4, 8).generator(gen)),
                                              std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(nn::LinearOptions(8, 2).generator(gen)));
  CHECK(names(mlp->named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Tensor x = test::random({3, 4}, DType::f32, 14);
  auto l0 = std::dynamic_pointer_cast<nn::Linear>((*mlp)[0]);
  auto l2 = std::dynamic_pointer_cast<nn::Linear>((*mlp)[2]);
  REQUIRE(l0);
  REQUIRE(l2);
  Tensor y = mlp->forward(x);
  test::check_close(y, values(l2->forward(nn::ReLU().forward(l0->forward(x)))), 1e-6, 1e-6, "Sequential");
  mse_loss(y, zeros({3, 2})).backward();
  for (const auto& [n, p] : mlp->named_parameters()) CHECK_MESSAGE(p.grad().defined(), n);
  std::ostringstream os;
  os << *mlp;
  CHECK(os.str() ==
        "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=true)\n  (1): ReLU()\n"
        "  (2): Linear(in_features=8, out_features=2, bias=true)\n)");
  CHECK_ERROR_CONTAINS(mlp->forward(zeros({3, 5})), "Linear(in_features=4)", "[3, 5]");
}
