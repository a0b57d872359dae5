// Shared pieces of the SyncBatchNorm tests (Gloo: test_sync_batch_norm.cpp, NCCL:
// test_cuda_ddp_features.cpp): a BatchNorm2d(3) with non-trivial parameters and statistics, the
// single-process oracle on a whole batch, and a flat reader of several tensors.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "test_util.h"

namespace kiln::test {

constexpr int64_t kBnChannels = 3;

// A BatchNorm2d(3) in f64 with momentum 0.3, non-trivial affine parameters and running statistics.
inline std::shared_ptr<nn::BatchNorm2d> make_bn() {
  auto bn = std::make_shared<nn::BatchNorm2d>(nn::BatchNormOptions(kBnChannels).momentum(0.3));
  bn->to(DType::f64);
  NoGradGuard no_grad;
  bn->weight.copy_(random({kBnChannels}, DType::f64, 5, 0.5, 1.5));
  bn->bias.copy_(random({kBnChannels}, DType::f64, 6));
  bn->running_mean.copy_(random({kBnChannels}, DType::f64, 7));
  bn->running_var.copy_(random({kBnChannels}, DType::f64, 8, 0.5, 2.0));
  return bn;
}

// The oracle: one process, the whole batch x_all, two training passes of loss sum(y * w_all) (the
// running statistics move twice, the gradients accumulate twice).
struct BnOracle {
  std::shared_ptr<nn::BatchNorm2d> bn;
  Tensor x, y;  // x holds the input gradient; y the last pass's output
};
inline BnOracle bn_oracle(const Tensor& x_all, const Tensor& w_all) {
  BnOracle o{make_bn(), x_all.clone().requires_grad_(true), Tensor()};
  o.bn->train();
  for (int pass = 0; pass < 2; ++pass) {
    o.y = o.bn->forward(o.x);
    sum(o.y * w_all).backward();
  }
  return o;
}

// Every element of `ts`, one after another (from any device).
inline std::vector<double> all_values(std::initializer_list<Tensor> ts) {
  std::vector<double> out;
  for (const Tensor& t : ts) {
    auto v = values(t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace kiln::test
