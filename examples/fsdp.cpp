// FSDP (fully sharded data parallel, ZeRO-3): each Block is a unit whose parameters live sharded
// across the ranks and are all-gathered only around its forward and its backward. A unit's hooks run
// when the model calls it through nn::call(block, x), so forward() must call wrapped modules that way.
// Alone it runs as a one-rank job; as a job: kiln-run --nproc-per-node 2 --standalone ./ex_fsdp
#include <cstdio>
#include <filesystem>
#include <string>

#include <kiln/kiln.h>

using namespace kiln;

struct Block : nn::Module {  // a residual MLP block; name() is what FSDPOptions::wrap matches
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 64));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(64, 16));
  Tensor forward(const Tensor& x) { return x + fc2->forward(gelu(fc1->forward(x))); }
  std::string name() const override { return "Block"; }
};

struct Net : nn::Module {
  std::shared_ptr<Block> b1 = register_module("b1", std::make_shared<Block>());
  std::shared_ptr<Block> b2 = register_module("b2", std::make_shared<Block>());
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(16, 1));  // root unit
  Tensor forward(const Tensor& x) { return head->forward(nn::call(*b2, nn::call(*b1, x))); }
  Tensor forward_unhooked(const Tensor& x) { return head->forward(b2->forward(b1->forward(x))); }  // wrong
};

int main() try {
  std::shared_ptr<dist::ProcessGroup> group;
  if (dist::launched()) {
    group = dist::init_process_group();  // under kiln-run: one rank of the job
  } else {                               // alone: a job of one rank
    std::filesystem::remove_all("fsdp_store");
    group = dist::make_gloo_process_group(dist::make_file_store("fsdp_store", 1), 0, 1);
  }
  const int rank = group->rank(), world = group->size();

  auto net = std::make_shared<Net>();
  optim::AdamW like(net->parameters(), optim::AdamWOptions(3e-3));  // the options FSDP's shards get
  auto fsdp = dist::FullyShardedDataParallel::create(net, like, group, dist::FSDPOptions().wrap({"Block"}));
  auto opt = fsdp->sharded_optimizer();  // steps this rank's shard of every unit

  Generator gen(uint64_t(100 + rank)), teacher(7);  // this rank's data; one target function for all
  Tensor x = randn({32, 16}, gen), y = tanh(matmul(x, randn({16, 1}, teacher)));
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    fsdp->prepare_forward();  // gathers the root unit
    Tensor loss = mse_loss(net->forward(x), y);
    loss.backward();          // each unit re-gathers for its backward, then reduce-scatters its gradients
    fsdp->finish();
    opt->clip_grad_norm(1.0);
    opt->step();
    opt->zero_grad();
    (step == 0 ? first : last) = loss.item();
  }
  const bool released = fsdp->gathered_bytes() == 0;  // between steps no unit holds full parameters
  optim::NamedTensors full = fsdp->full_state_dict();  // gathered one unit at a time; rank 0 holds it
  const bool state_ok = rank != 0 || full.size() == net->state_dict().size();

  std::string error;
  try {  // calling a unit's forward directly skips its hooks: the first read of the unit says so
    fsdp->prepare_forward();
    net->forward_unhooked(x);
  } catch (const Error& e) {
    error = e.what();
  }
  const bool named = error.find("nn::call") != std::string::npos;
  std::printf("rank %d of %d: %zu units, loss %.4f -> %.4f, released %s, misuse %s, full state %s\n", rank,
              world, fsdp->num_units(), first, last, released ? "yes" : "NO", named ? "named" : "NOT NAMED",
              state_ok ? "ok" : "WRONG");
  return last < 0.5 * first && released && named && state_ok ? 0 : 1;
} catch (const Error& e) {
  std::fprintf(stderr, "fsdp: %s\n", e.what());
  return 1;
}
