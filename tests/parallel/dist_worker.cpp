// dist_worker: one rank of a data-parallel scenario, started as a real process by kiln-run (or
// torchrun). argv[1] picks the scenario; the rank joins through init_process_group() and exits 0
// when its checks pass, 1 otherwise, printing what it compared. Registered in kiln_run_tests.cmake.
// `dist_worker SCENARIO --device cuda` runs the same scenario on the GPU over NCCL (one device per
// local rank; with KILN_TEST_ONE_GPU=1 every rank shares cuda:0 and poses as its own host so NCCL
// accepts it). `dist_worker --probe-cuda` exits 0 with a usable GPU, else 77 (CTest: skipped).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kiln/kiln.h>

using namespace kiln;
using namespace kiln::dist;

namespace {

// fc3(relu(fc2(relu(fc1(x))))), weights drawn from Generator(seed).
struct Net : nn::Module {
  Net(uint64_t seed, int64_t hidden = 16) {
    Generator g(seed);
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(nn::LinearOptions(6, hidden).generator(g)));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(nn::LinearOptions(hidden, hidden).generator(g)));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(nn::LinearOptions(hidden, 4).generator(g)));
  }
  Tensor forward(const Tensor& x) { return fc3->forward(relu(fc2->forward(relu(fc1->forward(x))))); }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

// fc2(relu(bn(fc1(x) as (B, 8, 1, 1)))): BatchNorm running statistics are buffers.
struct BNNet : nn::Module {
  explicit BNNet(uint64_t seed) {
    Generator g(seed);
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(nn::LinearOptions(6, 8).generator(g)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(8));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(nn::LinearOptions(8, 4).generator(g)));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = bn->forward(fc1->forward(x).reshape({x.shape()[0], 8, 1, 1}));
    return fc2->forward(relu(h.reshape({x.shape()[0], 8})));
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

// The device the scenario trains on (--device).
Device g_device = Device::cpu();

template <class M>
std::shared_ptr<M> on_device(std::shared_ptr<M> m) {
  m->to(g_device);
  return m;
}

uint64_t seed_for_rank(int rank) { return 100 + 17 * uint64_t(rank); }

// Rows [start, start + rows) of step `step`'s global batch (`total` rows): inputs and targets.
std::pair<Tensor, Tensor> batch_rows(int step, int64_t start, int64_t rows, int64_t total) {
  Generator gx(1000 + step), gy(2000 + step);
  Tensor x = randn({total, 6}, gx), y = randn({total, 4}, gy);
  return {x.narrow(0, start, rows).contiguous().to(g_device), y.narrow(0, start, rows).contiguous().to(g_device)};
}

template <class M>
Tensor rows_loss(M& net, int step, int64_t start, int64_t rows, int64_t total) {
  auto [x, y] = batch_rows(step, start, rows, total);
  return mse_loss(net.forward(x), y);
}

std::vector<double> flat(const std::vector<Tensor>& tensors) {
  std::vector<double> out;
  for (const Tensor& t : tensors) {
    auto v = t.to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// max |a - e| / (|e| + 0.01): parameters are O(0.1..1).
double max_rel_err(const std::vector<double>& a, const std::vector<double>& e) {
  if (a.size() != e.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - e[i]) / (std::fabs(e[i]) + 0.01));
  return worst;
}

std::shared_ptr<optim::AdamW> adamw(const nn::Module& m) {
  return std::make_shared<optim::AdamW>(m.parameters(), optim::AdamWOptions(1e-2));
}

// Several buckets even for this small net.
DDPOptions small_buckets() { return DDPOptions().first_bucket_cap_mb(100.0 / (1 << 20)).bucket_cap_mb(400.0 / (1 << 20)); }

// Trains on rank's share of a global batch (world * b rows per micro-step, `accum` micro-steps),
// then (rank 0) compares with one process on the whole batch. Collective.
bool train_and_compare(const std::shared_ptr<ProcessGroup>& pg, const TrainerOptions& options, int steps,
                       const std::function<void(Trainer&, int micro)>& inspect = nullptr) {
  const int world = pg->size(), rank = pg->rank(), accum = options.grad_accum_steps_;
  const int64_t b = 3, total = int64_t(world) * b * accum;
  auto net = on_device(std::make_shared<Net>(seed_for_rank(rank)));  // DDP broadcasts rank 0's weights
  Trainer trainer(net, adamw(*net), pg, options);
  for (int step = 0; step < steps; ++step)
    trainer.step([&](int m) {
      if (inspect) inspect(trainer, m);
      return rows_loss(*net, step, (int64_t(m) * world + rank) * b, b, total);
    });
  bool ok = true;
  if (rank == 0) {
    auto ref_net = on_device(std::make_shared<Net>(seed_for_rank(0)));
    Trainer ref(ref_net, adamw(*ref_net), nullptr, TrainerOptions().log_every(0));
    for (int step = 0; step < steps; ++step) ref.step([&](int) { return rows_loss(*ref_net, step, 0, total, total); });
    double err = max_rel_err(flat(net->parameters()), flat(ref_net->parameters()));
    // On the GPU the two runs sum in different orders (NCCL, cuBLAS): f32 rounding, not 1e-5 exact.
    const double tol = g_device.is_cuda() ? 1e-4 : 1e-5;
    ok = err <= tol;
    std::printf("%d ranks x %lld rows x %d micro-steps vs 1 process x %lld rows, %d AdamW steps on %s: max rel err "
                "%.3g (%s, tolerance %g)\n",
                world, (long long)b, accum, (long long)total, steps, g_device.str().c_str(), err, ok ? "ok" : "FAIL", tol);
  }
  pg->barrier()->wait();
  return ok;
}

// Forwards every collective to `inner` and counts the all-reduces.
class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)) {}
  std::string backend() const override { return inner_->backend(); }
  Device device() const override { return inner_->device(); }
  std::shared_ptr<Work> allreduce(Tensor& t, const AllreduceOptions& o) override {
    ++allreduces;
    return inner_->allreduce(t, o);
  }
  std::shared_ptr<Work> broadcast(Tensor& t, int root) override { return inner_->broadcast(t, root); }
  std::shared_ptr<Work> allgather(Tensor& out, const Tensor& in) override { return inner_->allgather(out, in); }
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, const AllreduceOptions& o) override {
    return inner_->reduce_scatter(out, in, o);
  }
  std::shared_ptr<Work> barrier() override { return inner_->barrier(); }
  int64_t allreduces = 0;

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

bool accumulate(const std::shared_ptr<ProcessGroup>& pg) {
  auto counting = std::make_shared<CountingGroup>(pg);
  auto net = on_device(std::make_shared<Net>(seed_for_rank(pg->rank())));
  Trainer trainer(net, adamw(*net), counting, TrainerOptions().grad_accum_steps(3).log_every(0).ddp(small_buckets()));
  bool ok = true;
  for (int step = 0; step < 4; ++step) {
    int64_t before = counting->allreduces;
    trainer.step([&](int m) { return rows_loss(*net, step, (m * pg->size() + pg->rank()) * 3, 3, 9 * pg->size()); });
    int64_t launched = counting->allreduces - before;
    size_t buckets = trainer.ddp()->reducer().bucket_count();
    ok = ok && launched == int64_t(buckets) && buckets > 1;
    std::printf("step %d: %lld all-reduces for %zu buckets with 3 micro-steps\n", step, (long long)launched, buckets);
  }
  pg->barrier()->wait();
  return ok && train_and_compare(pg, TrainerOptions().grad_accum_steps(3).ddp(small_buckets()), 3);
}

bool bucket_view(const std::shared_ptr<ProcessGroup>& pg) {
  int checked = 0;
  bool ok = true;
  // Before the second micro-step, the first one's gradients (accumulated under no_sync) must
  // already be slices of their buckets.
  auto inspect = [&](Trainer& t, int micro) {
    if (micro != 1) return;
    const Reducer& reducer = t.ddp()->reducer();
    const auto& params = reducer.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const Bucket& bucket = reducer.buckets()[reducer.bucket_of(i)];
      size_t pos = std::find(bucket.params.begin(), bucket.params.end(), i) - bucket.params.begin();
      Tensor g = params[i].grad();
      const char* want = static_cast<const char*>(bucket.flat.data_ptr()) + bucket.offsets[pos] * dtype_size(g.dtype());
      bool inside = g.defined() && g.data_ptr() == want;
      if (!inside) std::printf("parameter %zu: .grad is not its slice of bucket %zu\n", i, reducer.bucket_of(i));
      ok = ok && inside;
      ++checked;
    }
  };
  bool same = train_and_compare(
      pg, TrainerOptions().grad_accum_steps(2).ddp(small_buckets().gradient_as_bucket_view(true)), 3, inspect);
  std::printf("gradient_as_bucket_view: %d gradients checked, %s\n", checked, ok ? "all inside their buckets" : "FAIL");
  return same && ok && checked > 0;
}

bool mismatch(const std::shared_ptr<ProcessGroup>& pg) {
  auto net = on_device(std::make_shared<Net>(seed_for_rank(0), pg->rank() == 1 ? 12 : 16));
  try {
    Trainer trainer(net, adamw(*net), pg, TrainerOptions());
  } catch (const Error& e) {
    bool named = std::strstr(e.what(), "fc1.weight") != nullptr;
    std::printf("construction failed %s: %s\n", named ? "naming fc1.weight" : "WITHOUT naming fc1.weight", e.what());
    return named;
  }
  std::printf("FAIL: a model that differs across ranks was accepted\n");
  return false;
}

// Every rank's copy of `t` (flattened to f64), via all-gather.
std::vector<std::vector<double>> gather(ProcessGroup& pg, const Tensor& t) {
  Tensor mine = t.to(DType::f64).contiguous().reshape({t.numel()}).to(pg.device());
  Tensor all = zeros({t.numel() * pg.size()}, TensorOptions(DType::f64).device(pg.device()));
  pg.allgather(all, mine)->wait();
  std::vector<double> v = all.to_vector<double>();
  std::vector<std::vector<double>> out;
  for (int r = 0; r < pg.size(); ++r) out.emplace_back(v.begin() + r * t.numel(), v.begin() + (r + 1) * t.numel());
  return out;
}

bool all_equal(const std::vector<std::vector<double>>& per_rank) {
  return std::all_of(per_rank.begin(), per_rank.end(), [&](const auto& v) { return v == per_rank[0]; });
}

bool batchnorm(const std::shared_ptr<ProcessGroup>& pg) {
  auto net = on_device(std::make_shared<BNNet>(seed_for_rank(pg->rank())));
  Trainer trainer(net, adamw(*net), pg, TrainerOptions());
  const int64_t b = 4, total = b * pg->size();
  for (int step = 0; step < 4; ++step)
    trainer.step([&](int) { return rows_loss(*net, step, pg->rank() * b, b, total); });
  // After the last forward each rank's statistics include only its own batch ...
  bool differed = !all_equal(gather(*pg, net->bn->buffer("running_mean")));
  // ... until sync_buffers (the broadcast before each forward) makes rank 0's statistics everyone's.
  trainer.sync_buffers();
  bool ok = differed;
  for (const auto& [name, t] : net->named_buffers()) {
    bool same = all_equal(gather(*pg, t));
    std::printf("buffer %s: %s across ranks\n", name.c_str(), same ? "identical" : "DIFFERENT");
    ok = ok && same;
  }
  for (const auto& [name, t] : net->named_parameters()) ok = ok && all_equal(gather(*pg, t));
  double moved = 0;
  for (double v : net->bn->buffer("running_mean").to_vector<double>()) moved += std::fabs(v);
  std::printf("running_mean differed across ranks before the broadcast: %s; |running_mean| = %.3g\n",
              differed ? "yes" : "no", moved);
  pg->barrier()->wait();
  return ok && moved > 0;
}

bool kill(const std::shared_ptr<ProcessGroup>& pg) {
  // kiln-run stops the other workers (SIGTERM) as soon as rank 1 dies, which would race with the
  // surviving ranks printing their collective error; ignoring SIGTERM lets them report and exit
  // on their own (kiln-run still SIGKILLs them after --stop-grace).
  ::signal(SIGTERM, SIG_IGN);
  auto net = on_device(std::make_shared<Net>(seed_for_rank(pg->rank())));
  Trainer trainer(net, adamw(*net), pg, TrainerOptions().ddp(small_buckets()));
  try {
    for (int step = 0; step < 10; ++step)
      trainer.step([&](int) {
        if (step == 3 && pg->rank() == 1) {
          std::fflush(nullptr);
          ::_exit(9);
        }
        return rows_loss(*net, step, pg->rank() * 3, 3, 3 * pg->size());
      });
  } catch (const Error& e) {
    bool named = std::strstr(e.what(), "rank 1") != nullptr;
    std::printf("rank %d failed %s: %s\n", pg->rank(), named ? "as expected, naming rank 1" : "WITHOUT naming rank 1",
                e.what());
    std::fflush(nullptr);
    ::_exit(named ? 3 : 1);  // a failed group cannot be torn down cleanly
  }
  std::printf("FAIL: rank %d finished every step although rank 1 died\n", pg->rank());
  return false;
}

// Run with KILN_FAULT_INJECT=stall:rank=1:seq=N and a short KILN_DIST_TIMEOUT (dist_stall.sh):
// training must stop on every rank with a DistributedError from the watchdog, and main() then
// returns normally, destroying the trainer and the group (which must not wait out any timeout).
bool stall(const std::shared_ptr<ProcessGroup>& pg) {
  ::signal(SIGTERM, SIG_IGN);  // as in kill(): let every rank report before kiln-run stops it
  auto net = on_device(std::make_shared<Net>(seed_for_rank(pg->rank())));
  Trainer trainer(net, adamw(*net), pg, TrainerOptions().ddp(small_buckets()));
  try {
    for (int step = 0; step < 50; ++step)
      trainer.step([&](int) { return rows_loss(*net, step, pg->rank() * 3, 3, 3 * pg->size()); });
  } catch (const DistributedError& e) {
    const bool named = std::strstr(e.what(), "not reached by rank 1") != nullptr &&
                       std::strstr(e.what(), "flight recorder: ") != nullptr;
    std::printf("rank %d failed %s: %s\n", pg->rank(), named ? "as expected, naming rank 1" : "WITHOUT naming rank 1",
                e.what());
    std::fflush(nullptr);
    return named;  // main() reports "passed" and exits 0 only if it named rank 1
  }
  std::printf("FAIL: rank %d finished every step although rank 1 stalled\n", pg->rank());
  return false;
}

// Every collective of the group, in several dtypes, against values computed on the host:
// rank r contributes (r + 1) * (i + 1) at element i.
bool collectives(const std::shared_ptr<ProcessGroup>& pg) {
  const int n = pg->size(), r = pg->rank();
  const int64_t m = 1000;  // not a multiple of anything NCCL chunks by
  auto mine = [&](DType dt, int rank) {
    Tensor t = (arange(0, double(m), 1.0, DType::f64) + 1.0) * double(rank + 1);
    return t.to(dt).to(pg->device());
  };
  bool ok = true;
  auto expect = [&](const char* what, const Tensor& got, const std::vector<double>& want, double rtol) {
    std::vector<double> v = got.to_vector<double>();
    bool good = v.size() == want.size();
    for (size_t i = 0; good && i < v.size(); ++i) good = std::fabs(v[i] - want[i]) <= rtol * std::fabs(want[i]);
    std::printf("rank %d %s: %s\n", r, what, good ? "ok" : "WRONG");
    ok = ok && good;
  };
  const double ranks_sum = n * (n + 1) / 2.0;
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i64}) {
    const double rtol = dt == DType::bf16 ? 1e-2 : 0;
    std::vector<double> sum(m), mx(m);
    for (int64_t i = 0; i < m; ++i) sum[i] = ranks_sum * (i + 1), mx[i] = double(n) * (i + 1);
    Tensor t = mine(dt, r);
    pg->allreduce(t)->wait();
    expect((std::string("allreduce sum ") + dtype_name(dt)).c_str(), t, sum, rtol);
    t = mine(dt, r);
    pg->allreduce(t, AllreduceOptions().op(ReduceOp::max))->wait();
    expect((std::string("allreduce max ") + dtype_name(dt)).c_str(), t, mx, rtol);
    if (is_floating(dt)) {
      std::vector<double> avg(m);
      for (int64_t i = 0; i < m; ++i) avg[i] = sum[i] / n;
      t = mine(dt, r);
      pg->allreduce(t, AllreduceOptions().op(ReduceOp::avg))->wait();
      expect((std::string("allreduce avg ") + dtype_name(dt)).c_str(), t, avg, std::max(rtol, 1e-6));
    }
  }
  const int root = n - 1;
  Tensor b = mine(DType::f32, r);
  pg->broadcast(b, root)->wait();
  expect("broadcast from the last rank", b, mine(DType::f32, root).to_vector<double>(), 0);
  Tensor all = zeros({m * n}, TensorOptions(DType::f32).device(pg->device()));
  pg->allgather(all, mine(DType::f32, r))->wait();
  std::vector<double> gathered;
  for (int k = 0; k < n; ++k) {
    auto v = mine(DType::f32, k).to_vector<double>();
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  expect("allgather", all, gathered, 0);
  Tensor big = (arange(0, double(m * n), 1.0, DType::f32) * double(r + 1)).to(pg->device());
  Tensor part = zeros({m}, TensorOptions(DType::f32).device(pg->device()));
  pg->reduce_scatter(part, big)->wait();
  std::vector<double> want(m);
  for (int64_t i = 0; i < m; ++i) want[i] = ranks_sum * double(r * m + i);
  expect("reduce_scatter", part, want, 1e-6);
  pg->barrier()->wait();
  return ok;
}

// Three Linear(4, 4): with 80-byte buckets, three buckets of the same size (20 gradients and the
// same tail), so a collective issued out of turn pairs with a bucket of its own size.
struct Square : nn::Module {
  Square() {
    Generator g(5);
    for (const char* name : {"fc1", "fc2", "fc3"})
      fc.push_back(register_module(name, std::make_shared<nn::Linear>(nn::LinearOptions(4, 4).generator(g))));
  }
  Tensor forward(const Tensor& x) { return fc[2]->forward(relu(fc[1]->forward(relu(fc[0]->forward(x))))); }
  std::vector<std::shared_ptr<nn::Linear>> fc;
};

// Note [Deferred order check] end to end. Four clean synced iterations report nothing (on CUDA the
// first two are read on the host and the others compared on the device; on the CPU, where the
// default reads every iteration, the deferred mode is asked for). Then rank 1 issues one all-reduce
// too many before backward and rank 0 one after it: the counts match, so nothing hangs and backward
// ends without an error, and check_collective_order() reports the mismatch on every rank.
bool order_check(const std::shared_ptr<ProcessGroup>& pg) {
  const bool cuda = g_device.is_cuda();
  auto net = on_device(std::make_shared<Square>());
  auto opts = DDPOptions().first_bucket_cap_mb(80.0 / (1 << 20)).bucket_cap_mb(80.0 / (1 << 20))
                  .order_check(cuda ? OrderCheck::automatic : OrderCheck::deferred);
  DistributedDataParallel ddp(net, pg, opts);
  bool ok = ddp.reducer().bucket_count() == 3;
  auto iteration = [&](int i) {
    Generator g(300 + i);
    Tensor x = randn({2, 4}, g).to(g_device);
    mse_loss(ddp.forward<Square>(x), zeros({2, 4}).to(g_device)).backward();
    ddp.finish_gradient_synchronization();
  };
  for (int i = 0; i < 4; ++i) iteration(i);
  const int64_t deferred = ddp.reducer().order_checks_deferred(), host = ddp.reducer().order_checks_on_host();
  ok = ok && deferred == (cuda ? 2 : 4) && host == (cuda ? 2 : 0);
  std::printf("rank %d: clean iterations: %lld read on the host, %lld compared on the device\n", pg->rank(),
              (long long)host, (long long)deferred);
  try {
    ddp.check_collective_order();
  } catch (const Error& e) {
    std::printf("FAIL: rank %d: a clean run reported %s\n", pg->rank(), e.what());
    ok = false;
  }
  Tensor extra = full({ddp.reducer().buckets()[0].flat.numel()}, 7.0, TensorOptions(DType::f32).device(g_device));
  if (pg->rank() == 1) pg->allreduce(extra)->wait();
  iteration(4);  // every bucket meets the wrong partner; nothing is read yet
  if (pg->rank() == 0) pg->allreduce(extra)->wait();
  std::string message;
  try {
    ddp.check_collective_order();
  } catch (const Error& e) {
    message = e.what();
  }
  const bool found = message.find("collective order mismatch") != std::string::npos &&
                     message.find("of iteration 5") != std::string::npos &&
                     message.find("deferred check") != std::string::npos;
  std::printf("rank %d: %s: %s\n", pg->rank(), found ? "the deferred check reported" : "FAIL: expected a mismatch",
              message.c_str());
  pg->barrier()->wait();  // the group itself is fine: every collective had a partner
  return ok && found;
}

const std::map<std::string, std::function<bool(const std::shared_ptr<ProcessGroup>&)>> kScenarios = {
    {"collectives", collectives},
    {"equivalence", [](const auto& pg) { return train_and_compare(pg, TrainerOptions().ddp(small_buckets()), 5); }},
    {"accumulate", accumulate},
    {"bucket_view", bucket_view},
    {"mismatch", mismatch},
    {"batchnorm", batchnorm},
    {"kill", kill},
    {"stall", stall},
    {"order_check", order_check},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--probe-cuda") {
    std::printf("%s\n", cuda::build_info().c_str());
    return cuda::is_available() ? 0 : 77;
  }
  std::string names;
  for (const auto& [name, fn] : kScenarios) names += (names.empty() ? "" : ", ") + name;
  bool cuda_run = argc == 4 && std::string(argv[2]) == "--device" && std::string(argv[3]) == "cuda";
  if ((argc != 2 && !cuda_run) || !kScenarios.count(argv[1])) {
    std::fprintf(stderr, "usage: kiln-run --nproc-per-node N --standalone dist_worker SCENARIO [--device cuda]\n"
                         "       dist_worker --probe-cuda\nscenarios: %s\n", names.c_str());
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    // stall: KILN_DIST_TIMEOUT decides (InitOptions' 0 reads it).
    Millis timeout = scenario == "kill" ? Millis(10000) : scenario == "stall" ? Millis(0) : Millis(60000);
    if (cuda_run) {
      const char* one_gpu = std::getenv("KILN_TEST_ONE_GPU");
      const char* rank = std::getenv("RANK");
      // Several ranks on one GPU: NCCL refuses two ranks of one host on one device, so each rank
      // claims its own host id and the ranks talk over loopback sockets.
      if (one_gpu && std::string(one_gpu) == "1" && rank) {
        ::setenv("NCCL_HOSTID", (std::string("kiln-test-rank-") + rank).c_str(), 1);
        ::setenv("NCCL_SOCKET_IFNAME", "lo", 0);
        ::setenv("NCCL_IB_DISABLE", "1", 0);
        ::setenv("NCCL_MNNVL_ENABLE", "0", 0);  // no multi-node NVLink between the fake hosts
      }
    }
    auto pg = init_process_group(InitOptions().backend(cuda_run ? "nccl" : "gloo").timeout(timeout));
    if (cuda_run) g_device = pg->device();
    bool ok = kScenarios.at(scenario)(pg);
    std::printf("dist_worker %s: rank %d of %d %s\n", scenario.c_str(), pg->rank(), pg->size(), ok ? "passed" : "FAILED");
    std::fflush(nullptr);
    if (scenario == "mismatch") ::_exit(ok ? 0 : 1);  // the group is unusable after the failed check
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_worker %s failed: %s\n", scenario.c_str(), e.what());
    return 1;
  }
}
