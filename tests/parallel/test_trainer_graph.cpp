// The whole-step CUDA graph's CPU side (Note [Whole-step CUDA graph]): where a graph cannot be used
// the Trainer says so when it is built; while a thread captures, a host wait throws a message that
// names the cause; the optimizer's learning rate on the device is created before a capture and
// refused inside one. The graph itself runs in test_cuda_trainer_graph.cpp (GPU).
#include "test_util.h"

#include <thread>

#include <kiln/core/cuda/runtime/graph.h>
#include <kiln/parallel/trainer.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::Net;
using kiln::test::NetSpec;

TEST_CASE("cuda_graph with a model on the CPU is refused when the Trainer is built, naming the device") {
  auto net = std::make_shared<Net>(7, NetSpec{});
  auto opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions(1e-2));
  CHECK_THROWS_WITH_AS(Trainer(net, opt, nullptr, TrainerOptions().cuda_graph(true)),
                       doctest::Contains("the model must be on a CUDA device; its parameters are on cpu"), Error);
  CHECK_THROWS_WITH_AS(Trainer(net, opt, nullptr, TrainerOptions().cuda_graph(true).cuda_graph_warmup(0)),
                       doctest::Contains("cuda_graph_warmup must be >= 1"), Error);
  Trainer eager(net, opt, nullptr, TrainerOptions());  // off by default
  CHECK_FALSE(eager.graph_captured());
  CHECK(eager.graph_replays() == 0);
}

TEST_CASE("while a thread captures, waiting for the device throws and says why") {
  CHECK_FALSE(cuda::is_capturing());
  const int64_t syncs = cuda::host_sync_count();
  {
    cuda::detail::CaptureScope capturing;
    CHECK(cuda::is_capturing());
    CHECK_THROWS_WITH_AS(cuda::note_host_sync(), doctest::Contains("while this thread captures a CUDA graph"), Error);
    bool other_thread_capturing = true;
    std::thread([&] { other_thread_capturing = cuda::is_capturing(); }).join();
    CHECK_FALSE(other_thread_capturing);  // thread-local, as the capture mode
  }
  CHECK_FALSE(cuda::is_capturing());
  CHECK(cuda::host_sync_count() == syncs);
  cuda::note_host_sync();
  CHECK(cuda::host_sync_count() == syncs + 1);
}

TEST_CASE("the learning rate on the device: refreshed outside a capture, CPU parameters unaffected") {
  auto net = std::make_shared<Net>(7, NetSpec{});
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  opt.refresh_device_lr();  // CPU parameters: nothing to refresh
  for (Tensor& p : net->parameters()) p.set_grad(ones(p.shape()));
  const std::vector<double> before = test::flat_parameters(*net);
  {
    cuda::detail::CaptureScope capturing;
    CHECK_THROWS_WITH_AS(opt.refresh_device_lr(), doctest::Contains("while capturing a CUDA graph"), Error);
    opt.step();  // CPU parameters take the host path, capture or not
  }
  const std::vector<double> after = test::flat_parameters(*net);
  REQUIRE(after.size() == before.size());
  int moved = 0;
  for (size_t i = 0; i < after.size(); ++i) moved += after[i] != before[i];
  CHECK(moved == int(after.size()));
}
