// CifarCnn: output shapes, parameter names and counts, input checks, that a few SGD steps on a
// fixed synthetic batch reduce the loss, and that BatchNorm runs in f32 under autocast.
#include "test_util.h"

#include <kiln/data/augment.h>
#include <kiln/data/cifar10.h>
#include <kiln/models/cifar_cnn.h>
#include <kiln/optim/sgd.h>

using namespace kiln;
using namespace kiln::models;

namespace {

// Conv weights 9 * in * out each (no bias), BN weight + bias 2 * out each, head widths.back() * classes.
int64_t expected_params(const std::vector<int64_t>& widths, int64_t classes) {
  int64_t n = 0, in = 3;
  for (int64_t w : widths) {
    n += 9 * in * w + 9 * w * w + 4 * w;
    in = w;
  }
  return n + in * classes;
}

int64_t count_params(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("shapes, names and parameter counts") {
  Generator gen(1);
  CifarCnn tiny(CifarCnnConfig::tiny(), gen);
  CHECK(count_params(tiny) == expected_params({16, 32, 32}, 10));
  CHECK(count_params(tiny) == 35632);
  CifarCnn standard(CifarCnnConfig::standard(), gen);
  CHECK(count_params(standard) == expected_params({64, 256, 256}, 10));
  CHECK(count_params(standard) == 1960384);

  auto names = tiny.named_parameters();
  CHECK(names.front().first == "groups.0.conv1.weight");
  CHECK(names.back().first == "head.weight");
  CHECK(tiny.head->weight.shape() == Shape{10, 32});
  int bn_buffers = 0;
  for (auto& [n, b] : tiny.named_buffers()) bn_buffers += n.find("running_mean") != std::string::npos;
  CHECK(bn_buffers == 6);

  Tensor x = test::random({5, 3, 32, 32});
  for (CifarPool pool : {CifarPool::max, CifarPool::avg}) {
    CifarCnn m(CifarCnnConfig::tiny().pool(pool), gen);
    Tensor y = m.forward(x);
    CHECK(y.shape() == Shape{5, 10});
    CHECK(y.dtype() == DType::f32);
  }
  CHECK_ERROR_CONTAINS(tiny.forward(test::random({2, 3, 30, 30})), "multiples of 8", "[2, 3, 30, 30]");
  CHECK_ERROR_CONTAINS(CifarCnn(CifarCnnConfig().widths({})), "at least one group");
}

TEST_CASE("the head is scaled by head_scale") {
  Generator g1(4), g2(4);
  CifarCnn scaled(CifarCnnConfig::tiny(), g1), plain(CifarCnnConfig::tiny().head_scale(1.0), g2);
  Tensor x = test::random({4, 3, 32, 32}, DType::f32, 3);
  auto a = scaled.forward(x).to_vector<float>(), b = plain.forward(x).to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i] / 9.0).epsilon(1e-5));
}

TEST_CASE("a few SGD steps on a fixed synthetic batch reduce the loss") {
  auto data = data::make_synthetic_cifar10(data::SyntheticCifarOptions(64).seed(1));
  Tensor x = data::normalize(data.images);
  Generator gen(3);
  CifarCnn model(CifarCnnConfig::tiny(), gen);
  model.train();
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.2).momentum(0.9).nesterov(true));
  auto ce = CrossEntropyOptions().label_smoothing(0.2);
  std::vector<double> losses;
  for (int step = 0; step < 15; ++step) {
    model.zero_grad();
    Tensor loss = cross_entropy(model.forward(x), data.labels, ce);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  std::string trace;
  for (double l : losses) trace += std::to_string(l) + " ";
  CAPTURE(trace);
  CHECK(losses.back() < 0.8 * losses.front());
  CHECK(std::isfinite(losses.back()));
}

TEST_CASE("under autocast the convs run in bf16 and BatchNorm in f32") {
  Generator gen(2);
  CifarCnn model(CifarCnnConfig::tiny(), gen);
  Tensor x = test::random({4, 3, 32, 32});
  Tensor logits;
  {
    AutocastGuard guard(DType::bf16);
    Tensor h = model.groups->at<CifarConvGroup>(0)->conv1->forward(x);
    CHECK(h.dtype() == DType::bf16);
    CHECK(model.groups->at<CifarConvGroup>(0)->norm1->forward(h).dtype() == DType::f32);
    logits = model.forward(x);
  }
  CHECK(logits.dtype() == DType::bf16);  // the head is a matmul: low precision, as torch
  CHECK(model.groups->at<CifarConvGroup>(0)->norm1->running_mean.dtype() == DType::f32);
  Tensor loss = cross_entropy(logits, from_vector(std::vector<int64_t>{1, 2, 3, 4}, {4}));
  loss.backward();
  for (auto& [n, p] : model.named_parameters()) {
    CAPTURE(n);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::f32);
  }
}
