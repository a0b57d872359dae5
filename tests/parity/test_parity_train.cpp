// Parity with PyTorch 1.13 on whole training runs (tests/parity/gen_train.py): a 2-layer MLP and
// a small CNN (conv, batch norm, relu, max pool, flatten, linear) trained 20 steps with
// SGD(momentum 0.9, nesterov, weight decay) and with AdamW(weight decay) + linear-warmup-cosine
// + gradient clipping, from torch's initial weights on torch's batches. Losses and final weights
// must agree to 1e-5 (f32) and 1e-10 (f64) relative.
#include "parity_util.h"

#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>

using namespace kiln;

namespace {

constexpr int kSteps = 20;

std::shared_ptr<nn::Sequential> make_mlp() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(8, 16));
  m->push_back(std::make_shared<nn::GELU>(nn::GELUOptions().approximate(GeluApproximate::tanh)));
  m->push_back(std::make_shared<nn::Linear>(16, 4));
  return m;
}

std::shared_ptr<nn::Sequential> make_cnn() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3).padding(1).bias(false)));
  m->push_back(std::make_shared<nn::BatchNorm2d>(4));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(2));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(4 * 4 * 4, 5));
  return m;
}

void run(const SafetensorsFile& file, const std::string& model_name, const std::string& opt_name, DType dtype) {
  const std::string dname = dtype == DType::f32 ? "f32" : "f64";
  const double tol = dtype == DType::f32 ? 1e-5 : 1e-10;
  CAPTURE(model_name);
  CAPTURE(opt_name);
  CAPTURE(dname);
  auto model = model_name == "mlp" ? make_mlp() : make_cnn();
  model->to(dtype);
  model->load_state_dict(test::with_prefix(file, model_name + "." + dname + ".init."));
  model->train();
  Tensor xs = file.at(model_name + "." + dname + ".x"), ys = file.at(model_name + "." + dname + ".y");

  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> sched;
  if (opt_name == "sgd") {
    opt = std::make_unique<optim::SGD>(model->parameters(),
                                       optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-4));
  } else {
    opt = std::make_unique<optim::AdamW>(
        model->parameters(), optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
    sched = std::make_unique<optim::LRScheduler>(
        *opt, optim::warmup_cosine_schedule(optim::WarmupCosineOptions(5, kSteps).min_factor(0.1)));
  }
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad(true);
    Tensor loss = cross_entropy(model->forward(xs.select(0, s)), ys.select(0, s));
    loss.backward();
    if (sched) optim::clip_grad_norm(model->parameters(), 1.0);
    opt->step();
    if (sched) sched->step();
    losses.push_back(loss.item());
  }
  std::string key = model_name + "." + opt_name + "." + dname;
  test::check_close(losses, test::values(file.at(key + ".losses")), tol, 0, key + " losses");
  for (auto& [name, t] : model->state_dict()) test::check_rel(t, file.at(key + ".final." + name), tol, key + " " + name);
  // The run must have learned something, or the comparison proves little.
  CHECK(losses.back() < losses.front());
}

}  // namespace

TEST_CASE("MLP and CNN training runs reproduce PyTorch's losses and final weights") {
  SafetensorsFile file = test::load_oracle("parity_train.safetensors");
  for (const char* model : {"mlp", "cnn"})
    for (const char* opt : {"sgd", "adamw"})
      for (DType dt : {DType::f32, DType::f64}) run(file, model, opt, dt);
}
