// bench_gpt --sharding (bench_sharding.h): each mode runs on freshly forked ranks; rank 0 writes its
// figures to a file the parent reads back.
#include "bench_sharding.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <kiln/kiln.h>

namespace kiln::apps {

namespace {

ShardingTiming run_mode(const ShardingBenchOptions& o, dist::Sharding mode) {
  ShardingTiming out;
  out.mode = mode;
  std::string dir = (std::filesystem::temp_directory_path() / "kiln_bench_sharding_XXXXXX").string();
  KILN_CHECK(::mkdtemp(dir.data()) != nullptr, "bench_gpt --sharding: cannot create a temporary directory");
  const std::string result = dir + "/rank0.txt";
  auto exits = dist::spawn_ranks(o.world, [&](dist::ProcessGroup& pg) {
    set_num_threads(o.threads_per_rank);
    auto group = std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
    const size_t baseline = cpu_allocator_stats().allocated_bytes;
    auto model = std::make_shared<models::GPT>(models::GPTOptions(o.config));
    auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(3e-4).weight_decay(0.1));
    dist::Trainer trainer(model, opt, group,
                          dist::TrainerOptions().sharding(mode).amp(o.amp).log_every(0)
                              .ddp(dist::DDPOptions().gradient_as_bucket_view(true))
                              .fsdp(dist::FSDPOptions().wrap({"GPTBlock"})));  // full: a unit per block
    Generator g(1 + uint64_t(pg.rank()));
    Tensor idx = randint(0, o.config.vocab_size, {o.batch, o.seq}, g);
    Tensor targets = randint(0, o.config.vocab_size, {o.batch, o.seq}, g);
    auto step = [&] { trainer.step([&](int) { return model->loss(idx, targets); }); };
    for (int i = 0; i < o.warmup; ++i) step();
    std::vector<double> times;
    for (int i = 0; i < o.steps; ++i) {
      pg.barrier()->wait();  // the ranks start each timed step together
      const auto t0 = std::chrono::steady_clock::now();
      step();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    double params = 0;
    for (const Tensor& p : model->parameters()) params += double(p.numel());
    const double bytes = (double(cpu_allocator_stats().allocated_bytes) - double(baseline) - 2.0 * idx.nbytes()) / params;
    if (pg.rank() == 0) {
      std::ofstream f(result);
      f.precision(9);
      f << times[times.size() / 2] << " " << bytes << "\n";
    }
  }, dist::SpawnOptions().timeout(std::chrono::minutes(5)).guard(std::chrono::seconds(1800)));
  for (int r = 0; r < o.world; ++r)
    if (!exits[r].ok() && out.error.empty()) out.error = "rank " + std::to_string(r) + " " + exits[r].describe();
  std::ifstream f(result);
  if (out.error.empty() && !(f >> out.seconds >> out.bytes_per_param)) out.error = "rank 0 reported nothing";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return out;
}

}  // namespace

std::vector<ShardingTiming> time_sharding_modes(const ShardingBenchOptions& options,
                                                const std::vector<dist::Sharding>& modes) {
  std::vector<ShardingTiming> out;
  for (dist::Sharding m : modes) out.push_back(run_mode(options, m));
  return out;
}

}  // namespace kiln::apps
