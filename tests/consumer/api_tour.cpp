// The API tour of README "Embedding Kiln", snippet by snippet: each function body below is a
// README code block (compared line by line, indentation aside, by run_consumer_test.cmake), built
// against the installed package and run with checks so the README cannot rot.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include <kiln/kiln.h>

using namespace kiln;

#define TOUR_CHECK(cond)                                                   \
  do {                                                                     \
    if (!(cond)) throw std::runtime_error("api_tour: failed: " #cond);     \
  } while (0)

void tour_tensors() {
  Generator gen(42);
  Tensor a = randn({4, 3}, gen);                // f32 on the CPU
  Tensor b = tensor({1.f, 2.f, 3.f});           // 1-D from values
  Tensor c = a * b + 1.0;                       // broadcasting
  Tensor row = c.slice(0, 1, 2).reshape({3});   // views share storage; clone() copies
  float first = row.data<float>()[0];
  TOUR_CHECK(c.shape() == Shape({4, 3}) && first == c.select(0, 1).data<float>()[0]);
}

void tour_autograd() {
  Tensor w = tensor({2.0, -1.0}).requires_grad_();
  Tensor loss = sum(w * w);                     // d(loss)/dw = 2w
  loss.backward();
  Tensor g = w.grad();                          // {4, -2}
  bool tracked;
  {
    NoGradGuard no_grad;                        // grad mode is thread-local
    tracked = (w * 3.0).requires_grad();        // false: nothing recorded
  }
  TOUR_CHECK(!tracked && g.data<double>()[0] == 4.0 && g.data<double>()[1] == -2.0);
}

struct TwoLayer : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 16));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 1));
  Tensor forward(const Tensor& x) { return fc2->forward(gelu(fc1->forward(x))); }
};

void tour_modules() {
  auto net = std::make_shared<TwoLayer>();
  Tensor out = net->forward(randn({8, 4}));     // (8, 1)
  for (auto& [name, p] : net->named_parameters()) std::cout << name << " " << p.shape() << "\n";
  nn::save_weights(*net, "two_layer.safetensors");
  nn::load_weights(*net, "two_layer.safetensors");
  TOUR_CHECK(out.shape() == Shape({8, 1}) && net->named_parameters().size() == 4);
}

void tour_optimizers() {
  auto net = std::make_shared<nn::Linear>(4, 1);
  Tensor x = randn({32, 4}), y = randn({32, 1});
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::LRScheduler sched(opt, optim::warmup_cosine_schedule(optim::WarmupCosineOptions(2, 20)));
  double before = mse_loss(net->forward(x), y).item();
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    mse_loss(net->forward(x), y).backward();
    optim::clip_grad_norm(net->parameters(), 1.0);
    opt.step();
    sched.step();
  }
  TOUR_CHECK(mse_loss(net->forward(x), y).item() < before);
}

void tour_ddp(const std::string& dir) {
  // A one-rank group; under kiln-run use dist::init_process_group() instead.
  auto group = dist::make_gloo_process_group(dist::make_file_store(dir, 1), 0, 1);
  auto net = std::make_shared<nn::Linear>(4, 1);
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  dist::DistributedDataParallel ddp(net, group, dist::DDPOptions().bucket_cap_mb(25));
  Tensor loss = mse_loss(ddp.forward<nn::Linear>(randn({8, 4})), zeros({8, 1}));
  loss.backward();                              // buckets all-reduce as gradients arrive
  ddp.finish_gradient_synchronization();
  opt.step();
  TOUR_CHECK(net->weight.grad().defined());
}

void tour_trainer(std::shared_ptr<dist::ProcessGroup> group) {
  auto net = std::make_shared<TwoLayer>();
  auto opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions(3e-3));
  dist::Trainer trainer(net, opt, group, dist::TrainerOptions().grad_accum_steps(2).clip_grad_norm(1.0));
  Tensor x = randn({2, 16, 4}), y = randn({2, 16, 1});  // two micro-batches
  for (int step = 0; step < 10; ++step)
    trainer.step([&](int micro) { return mse_loss(net->forward(x.select(0, micro)), y.select(0, micro)); });
  trainer.save_checkpoint("tour_ckpt.safetensors");
  TOUR_CHECK(trainer.global_step() == 10);
}

void tour_errors() {
  try {
    zeros({2, 3}).select(0, 5);
  } catch (const IndexError& e) {               // also a kiln::Error
    std::printf("caught: %s\n", e.what());
  }
  try {
    nn::load_weights(*std::make_shared<nn::Linear>(4, 1), "missing.safetensors");
  } catch (const IOError& e) {
    std::printf("caught: %s\n", e.what());
  }
}

int main() try {
  const std::string store_dir = (std::filesystem::temp_directory_path() / "kiln_api_tour_store").string();
  std::filesystem::remove_all(store_dir);
  tour_tensors();
  tour_autograd();
  tour_modules();
  tour_optimizers();
  tour_ddp(store_dir);
  tour_trainer(nullptr);
  tour_errors();
  std::filesystem::remove_all(store_dir);
  std::printf("api tour ok\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
