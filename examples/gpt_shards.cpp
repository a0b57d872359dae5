// GPT on token shards: writes two small shards (the llm.c format), trains a small GPT on them with
// AdamW parameter groups (decay on matrices and embeddings, none on biases and norms), checkpoints
// the model, the optimizer and the data loader's cursor, and resumes all three in a fresh process state.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <kiln/kiln.h>

using namespace kiln;

models::GPTConfig tiny_config() {
  models::GPTConfig c;
  c.vocab_size = c.padded_vocab_size = 64;
  c.block_size = 32;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  return c;
}

struct Run {  // the model, its optimizer (two parameter groups), the Trainer and the shard loader
  std::shared_ptr<models::GPT> model = std::make_shared<models::GPT>(tiny_config());
  std::shared_ptr<optim::AdamW> opt = make_optimizer(*model);
  data::TokenLoader loader{data::TokenLoaderOptions("gpt_data/train_*.bin", 8, 32).vocab_size(64).seed(1)};
  dist::Trainer trainer{model, opt, nullptr, dist::TrainerOptions().log_every(1).clip_grad_norm(1.0)};

  static std::shared_ptr<optim::AdamW> make_optimizer(const models::GPT& gpt) {
    std::vector<optim::AdamW::Group> groups;
    for (auto& g : gpt.param_groups(/*weight_decay=*/0.1))
      groups.push_back({g.params, optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(g.weight_decay)});
    return std::make_shared<optim::AdamW>(std::move(groups));
  }
  double step() {
    return trainer.step([&](int) { data::TokenBatch b = loader.next(); return model->loss(b.x, b.y); }).loss;
  }
};

int main() try {
  // Two shards of a synthetic stream where each token usually repeats the one before it.
  std::filesystem::create_directories("gpt_data");
  data::SyntheticCorpus corpus(data::SyntheticCorpusOptions().vocab_size(64).lags({1}).noise(0.2));
  for (const char* name : {"gpt_data/train_000.bin", "gpt_data/train_001.bin"})
    data::write_token_shard(name, corpus.generate(8192));

  Run run;
  double first = run.step(), last = first;
  for (int i = 1; i < 60; ++i) last = run.step();
  run.trainer.save_checkpoint("gpt_ckpt.safetensors", run.loader.cursor());  // model, AdamW, schedule, cursor
  data::TokenBatch expected = run.loader.next();  // what an uninterrupted run reads next
  double expected_loss = run.model->loss(expected.x, expected.y).item();

  Run resumed;  // as a restarted process: fresh weights, optimizer and loader at epoch 0
  if (auto cursor = resumed.trainer.load_checkpoint("gpt_ckpt.safetensors")) resumed.loader.set_cursor(*cursor);
  data::TokenBatch got = resumed.loader.next();
  const bool same_batch = got.x.to_vector<int64_t>() == expected.x.to_vector<int64_t>();
  const bool same_model = resumed.model->loss(got.x, got.y).item() == expected_loss;
  std::printf("%zu parameter groups; loss %.3f -> %.3f (floor %.3f); resumed at step %lld: %s batch, %s loss\n",
              run.opt->num_param_groups(), first, last, corpus.entropy_floor(),
              (long long)resumed.trainer.global_step(), same_batch ? "same" : "DIFFERENT",
              same_model ? "same" : "DIFFERENT");
  return same_batch && same_model && last < 0.6 * first && run.opt->num_param_groups() == 2 ? 0 : 1;
} catch (const Error& e) {
  std::fprintf(stderr, "gpt_shards: %s\n", e.what());
  return 1;
}
