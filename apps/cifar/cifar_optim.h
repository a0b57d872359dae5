// train_cifar's optimizer (Nesterov SGD or AdamW over every parameter) and LR schedule (warmup,
// then a linear or cosine decay to 0 at the last step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/optim/lr_schedule.h>
#include <kiln/optim/optimizer.h>

namespace kiln::apps {

struct CifarOptimOptions {
  std::string kind = "sgd";  // "sgd" (Nesterov when momentum > 0; L2 weight decay) or "adamw" (decoupled)
  double lr = 0.2, momentum = 0.9, weight_decay = 5e-4;
};

std::shared_ptr<optim::Optimizer> make_cifar_optimizer(const CifarOptimOptions& o, std::vector<Tensor> params);

// Warmup then decay to 0 at `total` steps, as a factor of the peak lr: kind "linear" or "cosine".
optim::LRLambda make_cifar_schedule(const std::string& kind, int64_t warmup, int64_t total);

}  // namespace kiln::apps
