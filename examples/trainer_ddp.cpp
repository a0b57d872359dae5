// The data-parallel Trainer: gradient accumulation, bf16 autocast, clipping, automatic checkpoints and
// resume. Alone it trains as one process; as a job each process is one rank of DDP:
//   kiln-run --nproc-per-node 2 --standalone ./ex_trainer_ddp
// It trains 30 steps (checkpoint at step 20), then resumes a fresh model from the newest checkpoint
// and checks that steps 20-29 give the same losses again.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <kiln/kiln.h>

using namespace kiln;

// Micro-batch `micro` of this rank at `step`: the same on every run, different on every rank.
std::pair<Tensor, Tensor> batch(int64_t step, int micro, int rank) {
  Generator gen(uint64_t(step * 64 + micro * 8 + rank)), teacher(7);
  Tensor x = randn({16, 8}, gen);
  return {x, tanh(matmul(x, randn({8, 2}, teacher)))};
}

// Trains until step 30 and returns the loss of each step it ran (averaged over ranks).
std::vector<double> train(std::shared_ptr<dist::ProcessGroup> group, const std::string& dir, bool resume) {
  manual_seed(resume ? 1 : 0);  // a resumed run's initial weights are replaced by the checkpoint's
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(32, 2));
  auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(1e-2));
  dist::Trainer trainer(model, opt, group,
                        dist::TrainerOptions().grad_accum_steps(2).amp(DType::bf16).clip_grad_norm(1.0)
                            .log_every(1).checkpoint_every(20).checkpoint_dir(dir),
                        optim::warmup_cosine_schedule(optim::WarmupCosineOptions(5, 30)));
  if (resume) trainer.load_checkpoint(dist::Trainer::latest_checkpoint(dir));  // "" (nothing) is fine too
  std::vector<double> losses;
  while (trainer.global_step() < 30) {
    const int64_t step = trainer.global_step();
    auto stats = trainer.step([&](int micro) {
      auto [x, y] = batch(step, micro, trainer.rank());
      return mse_loss(model->forward(x), y);
    });
    losses.push_back(stats.loss);
  }
  return losses;
}

int main() try {
  auto group = dist::launched() ? dist::init_process_group() : nullptr;  // kiln-run, torchrun, srun, mpirun
  const bool main_rank = !group || group->rank() == 0;
  const std::string dir = "trainer_ckpt";
  if (main_rank) std::filesystem::remove_all(dir);  // only rank 0 writes checkpoints
  std::vector<double> full = train(group, dir, false), resumed = train(group, dir, true);
  bool same = resumed.size() == 10;
  for (size_t i = 0; same && i < resumed.size(); ++i) same = std::fabs(resumed[i] - full[20 + i]) <= 1e-6 * full[20 + i];
  if (main_rank)
    std::printf("world %d: loss %.4f -> %.4f; resumed at step 20: %s\n", group ? group->size() : 1, full.front(),
                full.back(), same ? "same losses" : "DIFFERENT losses");
  return same && full.back() < 0.5 * full.front() ? 0 : 1;
} catch (const Error& e) {
  std::fprintf(stderr, "trainer_ddp: %s\n", e.what());
  return 1;
}
