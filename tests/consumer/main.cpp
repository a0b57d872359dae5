// kiln_consumer: a program that embeds Kiln through find_package(Kiln) alone. It trains a small MLP
// on learnable synthetic data with the data-parallel Trainer (one rank, or N under kiln-run),
// saves a checkpoint, reloads it into a fresh model and checks the weights came back bitwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <kiln/kiln.h>

using namespace kiln;

// y = tanh(x A) B: a smooth target the MLP can learn. The same seeds on every rank, so every rank
// builds the same dataset and the same initial weights.
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 2));
  Tensor forward(const Tensor& x) { return fc2->forward(relu(fc1->forward(x))); }
};

bool same_weights(const nn::Module& a, const nn::Module& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i) {
    Tensor x = sa[i].second.contiguous(), y = sb[i].second.contiguous();
    if (sa[i].first != sb[i].first || x.shape() != y.shape() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

int main(int argc, char** argv) try {
  const std::string checkpoint = argc > 1 ? argv[1] : "consumer.safetensors";
  auto group = std::getenv("RANK") ? dist::init_process_group() : nullptr;
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;

  Generator data_gen(1);
  Tensor x = randn({64, 8}, data_gen), a = randn({8, 16}, data_gen), b = randn({16, 2}, data_gen);
  Tensor y = matmul(tanh(matmul(x, a)), b);
  const int64_t per_rank = 64 / world;  // this rank's share of the global batch
  Tensor xr = x.slice(0, rank * per_rank, (rank + 1) * per_rank);
  Tensor yr = y.slice(0, rank * per_rank, (rank + 1) * per_rank);

  manual_seed(0);
  auto model = std::make_shared<Mlp>();
  auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(1e-2));
  dist::Trainer trainer(model, opt, group, dist::TrainerOptions().log_every(1));
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto stats = trainer.step([&](int) { return mse_loss(model->forward(xr), yr); });
    (step == 0 ? first : last) = stats.loss;
  }
  trainer.save_checkpoint(checkpoint);

  manual_seed(7);  // different initial weights, so the reload has something to do
  auto fresh = std::make_shared<Mlp>();
  auto fresh_opt = std::make_shared<optim::AdamW>(fresh->parameters(), optim::AdamWOptions(1e-2));
  dist::Trainer resumed(fresh, fresh_opt, group);
  resumed.load_checkpoint(checkpoint);
  const bool equal = same_weights(*model, *fresh) && resumed.global_step() == trainer.global_step();

  std::printf("rank %d of %d: loss first=%.6f last=%.6f\n", rank, world, first, last);
  std::printf("rank %d of %d: reload %s\n", rank, world, equal ? "equal" : "DIFFERS");
  return equal && last < first ? 0 : 1;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "kiln_consumer: %s\n", e.what());
  return 1;
}
