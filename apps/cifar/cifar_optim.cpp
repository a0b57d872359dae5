// make_cifar_optimizer / make_cifar_schedule (see cifar_optim.h).
#include "cifar_optim.h"

#include <algorithm>

#include <kiln/optim/adamw.h>
#include <kiln/optim/sgd.h>

namespace kiln::apps {

std::shared_ptr<optim::Optimizer> make_cifar_optimizer(const CifarOptimOptions& o, std::vector<Tensor> params) {
  if (o.kind == "sgd")
    return std::make_shared<optim::SGD>(
        std::move(params), optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.momentum > 0).weight_decay(o.weight_decay));
  return std::make_shared<optim::AdamW>(std::move(params), optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
}

optim::LRLambda make_cifar_schedule(const std::string& kind, int64_t warmup, int64_t total) {
  if (kind == "cosine") return optim::warmup_cosine_schedule(optim::WarmupCosineOptions(std::max<int64_t>(warmup, 0), total));
  return [warmup, total](int64_t s) {
    if (s < warmup) return double(s + 1) / double(warmup);
    return std::max(0.0, double(total - s) / double(total - warmup));
  };
}

}  // namespace kiln::apps
