// Shared pieces of the static_graph tests (Gloo: test_ddp_static_graph.cpp, NCCL:
// test_cuda_ddp_features.cpp): a forward that uses fc2 inside a re-entrant checkpoint region and
// again outside it (two gradients per backward), and its single-process oracle.
#pragma once

#include <memory>
#include <vector>

#include <kiln/autograd/checkpoint.h>

#include "parallel/ddp_fixtures.h"

namespace kiln::test {

// fc3(relu(fc2(checkpoint(relu(fc2(relu(fc1(x)))))))): fc2's accumulator runs twice per backward.
inline Tensor twice_forward(Net& net, const Tensor& x) {
  Tensor h = relu(net.fc1->forward(x));
  h = autograd::checkpoint([&net](const Tensor& t) { return relu(net.fc2->forward(t)); }, h);
  h = relu(net.fc2->forward(h));
  return net.fc3->forward(h);
}

// One process on the whole global batch of `world` ranks, s.steps AdamW steps.
inline std::vector<double> twice_forward_reference(const TrainSpec& s, int world) {
  auto net = std::make_shared<Net>(seed_for_rank(0), s.net);
  net->to(s.dtype);
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  for (int step = 0; step < s.steps; ++step) {
    opt.zero_grad();
    auto [x, y] = batch_rows(s, step, 0, world * s.batch, world * s.batch);
    mse_loss(twice_forward(*net, x), y).backward();
    opt.step();
  }
  return flat_parameters(*net);
}

}  // namespace kiln::test
