// The training example from README.md, compiled and run so it cannot rot: an MLP on learnable
// labels, AdamW with warmup-cosine and clipping, weights saved and loaded back.
#include "test_util.h"

#include <filesystem>

using namespace kiln;

TEST_CASE("the README training example trains and round-trips its weights") {
  Generator g(3);
  Tensor x = randn({64, 8}, g);
  Tensor teacher = randn({8, 4}, g);
  Tensor y = ops::argmax(ops::matmul(x, teacher), 1);

  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(8, 16),
      std::make_shared<nn::GELU>(nn::GELUOptions().approximate(GeluApproximate::tanh)),
      std::make_shared<nn::Linear>(16, 4));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  optim::LRScheduler sched(opt, optim::warmup_cosine_schedule(optim::WarmupCosineOptions(5, 20).min_factor(0.1)));
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    optim::clip_grad_norm(model->parameters(), 1.0);
    opt.step();
    sched.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < 0.8 * first);

  std::string path = (std::filesystem::temp_directory_path() / "kiln_readme_model.safetensors").string();
  nn::save_weights(*model, path);
  auto copy = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::GELU>(),
                                               std::make_shared<nn::Linear>(16, 4));
  nn::load_weights(*copy, path);
  for (auto& [name, t] : model->state_dict()) {
    Tensor other;
    for (auto& [n, u] : copy->state_dict())
      if (n == name) other = u;
    CHECK(test::values(other) == test::values(t));
  }
  std::filesystem::remove(path);
}
