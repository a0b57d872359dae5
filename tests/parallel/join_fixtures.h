// Shared pieces of the join tests (Gloo: test_ddp_join.cpp, NCCL: test_cuda_ddp_features.cpp):
// uneven per-rank batch counts, the single-process oracle that sees at each step the samples of
// the ranks still training, and one rank's DDP training inside join() on a given device.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include <kiln/parallel/ddp.h>

#include "parallel/ddp_fixtures.h"

namespace kiln::test {

struct JoinSpec {
  TrainSpec train;
  std::vector<int> batches;  // per rank
  bool initial_divisor = true;
  int world() const { return int(batches.size()); }
  int64_t total() const { return world() * train.batch * train.accum; }
  // Rank r's micro-batch m of step t (on the CPU).
  std::pair<Tensor, Tensor> rows(int t, int m, int r) const {
    return batch_rows(train, t, (int64_t(m) * world() + r) * train.batch, train.batch, total());
  }
};

// One process: at step t the ranks with more than t batches contribute their (mean) losses,
// summed and divided by the world size or by their count; AdamW as in the fixtures.
// `losses` gets the mean loss of the ranks still in, per step (before the update).
inline std::vector<double> join_reference(const JoinSpec& j, std::vector<double>* losses = nullptr) {
  auto net = std::make_shared<Net>(seed_for_rank(0), j.train.net);
  net->to(j.train.dtype);
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  const int steps = *std::max_element(j.batches.begin(), j.batches.end());
  for (int t = 0; t < steps; ++t) {
    std::vector<int> in;
    for (int r = 0; r < j.world(); ++r)
      if (j.batches[size_t(r)] > t) in.push_back(r);
    const double divisor = j.initial_divisor ? j.world() : double(in.size());
    opt.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < j.train.accum; ++m) {
      Tensor loss;
      for (int r : in) {
        auto [x, y] = j.rows(t, m, r);
        Tensor l = mse_loss(net->forward(x), y);
        loss_sum += l.item();
        loss = loss.defined() ? loss + l : l;
      }
      (loss * (1.0 / (divisor * j.train.accum))).backward();
    }
    if (losses) losses->push_back(loss_sum / double(in.size() * j.train.accum));
    opt.step();
  }
  return flat_parameters(*net);
}

// One rank's run of its batches inside DistributedDataParallel::join, the net and batches on
// `device` (the group's); returns its parameters (on the host) after join.
inline std::vector<double> train_joined(std::shared_ptr<dist::ProcessGroup> pg, const JoinSpec& j,
                                        dist::DDPOptions options, Device device = Device::cpu()) {
  const int rank = pg->rank();
  auto net = std::make_shared<Net>(seed_for_rank(rank), j.train.net);
  net->to(j.train.dtype);
  net->to(device);
  dist::DistributedDataParallel ddp(net, std::move(pg), options);
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  int steps = 0;
  ddp.join(
      [&] {
        for (int t = 0; t < j.batches[size_t(rank)]; ++t) {
          opt.zero_grad(/*set_to_none=*/false);
          for (int m = 0; m < j.train.accum; ++m) {
            // Before the forward, as torch's `with ddp.no_sync():` around forward and backward: the
            // join header tells the ranks that ran out whether this backward syncs.
            ddp.set_require_backward_grad_sync(m + 1 == j.train.accum);
            auto [x, y] = j.rows(t, m, rank);
            Tensor loss = mse_loss(ddp.forward<Net>(x.to(device)), y.to(device)) * (1.0 / j.train.accum);
            loss.backward();
          }
          ddp.set_require_backward_grad_sync(true);
          ddp.finish_gradient_synchronization();
          opt.step();
          ++steps;
        }
      },
      dist::JoinOptions().divide_by_initial_world_size(j.initial_divisor));
  expect(steps == j.batches[size_t(rank)], "the body ran this rank's batches");
  expect(!ddp.join_active(), "join mode ends with join()");
  return flat_parameters(*net);
}

}  // namespace kiln::test
