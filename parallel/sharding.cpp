// Sharding names, and shard_optimizer: rebuilding an SGD or AdamW over shard views with the
// original's hyper-parameters.
#include <kiln/parallel/sharding.h>

#include <cmath>

#include <kiln/optim/adamw.h>
#include <kiln/optim/sgd.h>

namespace kiln::dist {

const char* sharding_name(Sharding s) {
  switch (s) {
    case Sharding::none: return "none";
    case Sharding::zero1: return "zero1";
    case Sharding::zero2: return "zero2";
    case Sharding::full: return "full";
  }
  return "?";
}

Sharding parse_sharding(const std::string& name) {
  for (Sharding s : {Sharding::none, Sharding::zero1, Sharding::zero2, Sharding::full})
    if (name == sharding_name(s)) return s;
  KILN_FAIL("unknown sharding mode '", name, "' (none, zero1, zero2, full)");
  return Sharding::none;
}

namespace {

// A factory for optimizer type Opt whose groups get `like`'s hyper-parameters.
template <class Opt>
ShardedOptimizer::Factory factory_like(const optim::Optimizer& like) {
  std::vector<optim::HyperParams> hyper;
  for (size_t g = 0; g < like.num_param_groups(); ++g) hyper.push_back(like.hyper_parameters(g));
  return [hyper](std::vector<std::vector<Tensor>> shards) -> std::unique_ptr<optim::Optimizer> {
    std::vector<typename Opt::Group> groups;
    for (auto& s : shards) groups.push_back(typename Opt::Group{std::move(s), decltype(Opt::Group::options)()});
    auto opt = std::make_unique<Opt>(std::move(groups));
    for (size_t g = 0; g < hyper.size(); ++g) opt->set_hyper_parameters(g, hyper[g]);
    return opt;
  };
}

}  // namespace

std::shared_ptr<ShardedOptimizer> shard_optimizer(const optim::Optimizer& like, std::shared_ptr<ProcessGroup> group,
                                                  ShardedOptimizerOptions options) {
  for (const auto& [key, t] : like.state_dict())
    KILN_CHECK(key.rfind("state.", 0) != 0, "shard_optimizer: the ", like.name(),
               " has state already (it was stepped or loaded); shard it before training or load the checkpoint "
               "into the sharded optimizer");
  ShardedOptimizer::Factory factory;
  if (dynamic_cast<const optim::AdamW*>(&like))
    factory = factory_like<optim::AdamW>(like);
  else if (dynamic_cast<const optim::SGD*>(&like))
    factory = factory_like<optim::SGD>(like);
  else
    KILN_FAIL("shard_optimizer: cannot rebuild a ", like.name(), " over shards (SGD and AdamW can); build a "
              "ShardedOptimizer with a factory yourself");
  std::vector<std::vector<Tensor>> groups;
  for (size_t g = 0; g < like.num_param_groups(); ++g) groups.push_back(like.params(g));
  auto sharded = std::make_shared<ShardedOptimizer>(std::move(groups), std::move(group), factory, options);
  for (size_t g = 0; g < like.num_param_groups(); ++g)
    if (!std::isnan(like.initial_lr(g))) sharded->set_initial_lr(g, like.initial_lr(g));
  return sharded;
}

}  // namespace kiln::dist
