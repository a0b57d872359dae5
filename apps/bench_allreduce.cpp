// bench_allreduce: f32 sum allreduce time and bandwidth for sizes 1 KiB .. 256 MiB (powers of 4),
// printed by rank 0 with nccl-tests' definitions: algbw = bytes / time, busbw = algbw * 2(n-1)/n.
// Run it under a launcher (kiln-run, torchrun, srun, mpirun) or with --spawn N local ranks (Gloo).
// With --backend nccl (or auto on a GPU machine) the tensors live on each rank's GPU.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <kiln/core/cuda/runtime/stream.h>  // current_stream
#include <kiln/kiln.h>
#include <kiln/parallel/init.h>
#include <kiln/parallel/spawn.h>

#include "common/app_main.h"

using namespace kiln;

namespace {

struct Config {
  int64_t min_bytes = 1024;
  int64_t max_bytes = int64_t(256) << 20;
  double min_seconds = 0.2;  // per size, after the warm-ups
};

std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && b % 1024 == 0 && u < 3) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + " " + units[u];
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Work::wait() on NCCL only orders the caller's stream; the host clock needs the device done.
void sync(dist::ProcessGroup& pg) {
  if (pg.device().is_cuda()) cuda::current_stream(pg.device().index).synchronize();
}

// Every rank runs this; rank 0 prints. Iteration counts are agreed through a broadcast from
// rank 0 so all ranks issue the same collectives.
void run(dist::ProcessGroup& pg, const Config& cfg) {
  int n = pg.size();
  if (pg.rank() == 0) {
    std::printf("bench_allreduce: %s, %d ranks, f32 sum; busbw = algbw * 2(n-1)/n\n", pg.backend().c_str(), n);
    std::printf("%10s %8s %12s %12s %12s\n", "size", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    std::fflush(stdout);
  }
  for (int64_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= 4) {
    int64_t numel = bytes / 4;
    Tensor t = ones({numel}, TensorOptions(DType::f32).device(pg.device()));
    pg.allreduce(t)->wait();  // warm-up, and a correctness check
    KILN_CHECK(t.to_vector<float>()[numel - 1] == float(n), "bench_allreduce: the sum of ones over ", n,
               " ranks came out as ", t.to_vector<float>()[numel - 1]);
    t.zero_();  // zeros stay zeros under repeated sums

    // Probe: time a few iterations on rank 0 and agree on the count.
    double t0 = now_seconds();
    for (int k = 0; k < 3; ++k) pg.allreduce(t)->wait();
    sync(pg);
    Tensor iters = full({1}, std::clamp(cfg.min_seconds / ((now_seconds() - t0) / 3), 5.0, 10000.0),
                        TensorOptions(DType::i64).device(pg.device()));
    pg.broadcast(iters, 0)->wait();
    int64_t count = iters.item<int64_t>();

    pg.barrier()->wait();
    t0 = now_seconds();
    std::vector<std::shared_ptr<dist::Work>> works;
    works.reserve(count);
    for (int64_t k = 0; k < count; ++k) works.push_back(pg.allreduce(t));
    for (auto& w : works) w->wait();
    sync(pg);
    double per = (now_seconds() - t0) / double(count);
    if (pg.rank() == 0) {
      double algbw = double(bytes) / per / 1e9;
      double busbw = algbw * 2.0 * (n - 1) / n;
      std::printf("%10s %8lld %12.1f %12.3f %12.3f\n", human_bytes(bytes).c_str(), static_cast<long long>(count),
                  per * 1e6, algbw, busbw);
      std::fflush(stdout);
    }
  }
}

// Forks `ranks` processes on this machine that rendezvous through a file store.
int spawn(int ranks, const Config& cfg, dist::Millis timeout) {
  auto exits = dist::spawn_ranks(ranks, [&](dist::ProcessGroup& pg) { run(pg, cfg); },
                                 dist::SpawnOptions().timeout(timeout));
  auto failed = std::count_if(exits.begin(), exits.end(), [](const dist::RankExit& e) { return !e.ok(); });
  if (failed) std::fprintf(stderr, "bench_allreduce: %d of %d ranks failed\n", int(failed), ranks);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_allreduce: allreduce time and bandwidth across ranks (nccl-tests' algbw/busbw)"};
  Config cfg;
  int spawn_ranks = 0;
  int timeout_s = 300;
  std::string backend = "gloo";
  app.add_option("--spawn", spawn_ranks, "fork this many local ranks (file-store rendezvous) instead of "
                                         "reading a launcher's RANK/WORLD_SIZE/MASTER_*")->check(CLI::Range(1, 1024));
  app.add_option("--max-bytes", cfg.max_bytes, "largest message (bytes; sizes go 1 KiB, 4 KiB, ...)")
      ->check(CLI::Range(int64_t(1024), int64_t(1) << 34));
  app.add_option("--min-seconds", cfg.min_seconds, "timed seconds per size (at least 5 iterations)")
      ->check(CLI::PositiveNumber);
  app.add_option("--backend", backend, "under a launcher: auto, gloo or nccl");
  app.add_option("--timeout", timeout_s, "rendezvous and collective timeout (seconds)")->check(CLI::PositiveNumber);
  return kiln::apps::run_main(app, argc, argv, kiln::apps::AppMainOptions("bench_allreduce"), [&]() -> int {
    dist::Millis timeout = std::chrono::seconds(timeout_s);
    if (spawn_ranks > 0) return spawn(spawn_ranks, cfg, timeout);
    auto pg = dist::init_process_group(dist::InitOptions().backend(backend).timeout(timeout));
    run(*pg, cfg);
    pg->barrier()->wait();
    return 0;
  });
}
