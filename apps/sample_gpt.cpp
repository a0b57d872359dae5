// sample_gpt: generates text from a GPT checkpoint — a train_gpt checkpoint (the Trainer's
// "model.*" tensors) or a Hugging Face GPT-2 safetensors file. Each new token recomputes the whole
// context (no KV cache: simple, and fast enough for the sizes a CPU samples from).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "common/app_main.h"
#include "gpt/model_flags.h"

using namespace kiln;

namespace {

struct Args {
  apps::ModelFlags shape;
  std::string checkpoint, config_path, prompt, prompt_ids, tokenizer_dir = data::gpt2_tokenizer_dir();
  int64_t tokens = 64, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 42;
  int threads = 0;
  std::string device = "cpu";
  bool no_kv_cache = false;
  bool no_verify = false;
};

// The model's shape: --config, else config.json next to the checkpoint (train_gpt writes it),
// else --model with the --n-* overrides.
models::GPTConfig load_config(const Args& a) {
  std::string path = a.config_path;
  if (path.empty()) {
    auto beside = std::filesystem::path(a.checkpoint).parent_path() / "config.json";
    if (std::filesystem::is_regular_file(beside)) path = beside.string();
  }
  if (path.empty()) return apps::apply_overrides(a.shape, models::gpt_config(a.shape.model));
  std::ifstream in(path);
  KILN_CHECK(in.good(), "cannot open the config ", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return apps::apply_overrides(a.shape, models::GPTConfig::from_json(text, "config " + path));
}

// A train_gpt checkpoint (metadata format "kiln.checkpoint": weights under "model.") or an HF file.
// A checkpoint's data is checked against its stored checksum first (a corrupt one is an IOError,
// never sampled from); --no-verify skips that read for speed.
void load_weights(models::GPT& model, const std::string& path, bool verify) {
  SafetensorsFile file = load_safetensors(path);
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != "kiln.checkpoint") {
    models::load_gpt_hf(model, path);
    return;
  }
  if (verify) optim::verify_loaded_checkpoint(file, path, "sample_gpt");
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : file.tensors)
    if (name.rfind("model.", 0) == 0) state.emplace(name.substr(6), t);
  model.load_state_dict(state, /*strict=*/true);
}

// GPT-2's tokenizer for GPT-2 vocabularies when --tokenizer-dir holds its files (else ids are
// printed as numbers and --prompt needs --prompt-ids).
std::optional<data::Gpt2Tokenizer> load_tokenizer(const Args& a, const models::GPTConfig& c) {
  if (c.vocab_size == 256) return std::nullopt;
  const std::filesystem::path dir(a.tokenizer_dir);
  if (!std::filesystem::exists(dir / "encoder.json") || !std::filesystem::exists(dir / "vocab.bpe")) return std::nullopt;
  data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(a.tokenizer_dir);
  KILN_CHECK(int64_t(tok.vocab_size()) <= c.vocab_size, "the GPT-2 tokenizer in ", a.tokenizer_dir, " has ",
             tok.vocab_size(), " tokens, more than the model's vocabulary ", c.vocab_size);
  return tok;
}

std::vector<int64_t> prompt_tokens(const Args& a, const models::GPTConfig& c, const data::Gpt2Tokenizer* bpe) {
  std::vector<int64_t> ids;
  if (!a.prompt_ids.empty()) {
    std::stringstream ss(a.prompt_ids);
    for (std::string item; std::getline(ss, item, ',');) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(item, &used);
      } catch (const std::exception&) {
      }
      KILN_CHECK(used == item.size() && id >= 0 && id < c.vocab_size, "--prompt-ids: \"", item,
                 "\" is not a token id below the vocabulary size ", c.vocab_size);
      ids.push_back(id);
    }
  } else if (!a.prompt.empty()) {
    if (bpe) {
      for (uint32_t t : bpe->encode(a.prompt)) ids.push_back(t);
    } else {
      KILN_CHECK(c.vocab_size == 256, "--prompt text needs the byte-level vocabulary (256) or GPT-2's tokenizer "
                 "files in --tokenizer-dir (scripts/get-gpt2-tokenizer.sh); this model has ", c.vocab_size,
                 " tokens: give --prompt-ids");
      for (uint16_t t : data::bytes_to_tokens(a.prompt)) ids.push_back(t);
    }
  }
  if (ids.empty()) ids.push_back(c.vocab_size == 256 ? '\n' : c.vocab_size - 1);  // '\n' / <|endoftext|>
  return ids;
}

// Next token from the last position's logits over the real vocabulary: temperature, top-k, then
// a draw from the softmax (temperature 0: the argmax).
int64_t sample_next(std::vector<float> logits, const Args& a, std::mt19937_64& rng) {
  const auto n = static_cast<int64_t>(logits.size());
  if (a.temperature == 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<double> p(logits.begin(), logits.end());
  for (double& x : p) x /= a.temperature;
  if (a.top_k > 0 && a.top_k < n) {
    std::vector<double> sorted = p;
    std::nth_element(sorted.begin(), sorted.begin() + (a.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[size_t(a.top_k - 1)];
    for (double& x : p)
      if (x < kth) x = -INFINITY;
  }
  const double mx = *std::max_element(p.begin(), p.end());
  for (double& x : p) x = std::exp(x - mx);
  std::discrete_distribution<int64_t> dist(p.begin(), p.end());
  return dist(rng);
}

int run(const Args& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  const models::GPTConfig config = load_config(a);
  KILN_CHECK(a.device == "cpu" || cuda::is_available(), "--device cuda: no usable CUDA device (", cuda::build_info(),
             ")");
  const Device device = a.device == "cuda" ? Device::cuda() : Device::cpu();
  models::GPT model(config);
  load_weights(model, a.checkpoint, !a.no_verify);
  model.to(device);
  model.eval();
  const std::optional<data::Gpt2Tokenizer> bpe = load_tokenizer(a, config);
  auto emit = [&](int64_t id) {
    if (config.vocab_size == 256) {
      std::fputc(static_cast<int>(id), stdout);
    } else if (bpe && id < int64_t(bpe->vocab_size())) {
      const std::string& bytes = bpe->token_bytes(uint32_t(id));
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    } else {
      std::printf("%lld ", static_cast<long long>(id));
    }
    std::fflush(stdout);
  };

  std::vector<int64_t> ids = prompt_tokens(a, config, bpe ? &*bpe : nullptr);
  for (int64_t id : ids) emit(id);
  std::mt19937_64 rng(a.seed);
  NoGradGuard no_grad;
  auto ids_tensor = [&](std::vector<int64_t>::const_iterator from) {
    return from_vector<int64_t>(std::vector<int64_t>(from, ids.cend()), {1, int64_t(ids.cend() - from)}).to(device);
  };
  // The last position's logits over the real vocabulary, as floats on the host.
  auto last_logits = [&](const Tensor& logits) {
    const int64_t t = logits.size(1);
    return logits.select(1, t - 1).select(0, 0).narrow(0, 0, config.vocab_size).to(DType::f32).to_vector<float>();
  };
  models::GPTKVCache cache(model, 1);
  bool primed = false;
  for (int64_t i = 0; i < a.tokens; ++i) {
    Tensor logits;
    if (a.no_kv_cache) {
      // The whole context again (cropped to the last block_size tokens).
      const auto t = std::min<int64_t>(int64_t(ids.size()), config.block_size);
      logits = model.forward(ids_tensor(ids.cend() - t));
    } else {
      if (cache.length() == cache.capacity()) cache.reset();  // full: re-prime with the last half block
      if (cache.length() == 0) {
        // The prompt (up to a whole block) first; later re-primes keep the last half block.
        const int64_t room = primed ? std::max<int64_t>(1, config.block_size / 2) : config.block_size;
        const auto keep = std::min<int64_t>(int64_t(ids.size()), room);
        logits = cache.forward(ids_tensor(ids.cend() - keep));
        primed = true;
      } else {
        logits = cache.forward(ids_tensor(ids.cend() - 1));
      }
    }
    int64_t next = sample_next(last_logits(logits), a, rng);
    ids.push_back(next);
    emit(next);
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sample_gpt: generate tokens from a GPT checkpoint with a KV cache (one position's forward pass per "
               "token; when the cache fills block_size it re-primes with the last half block). Byte-level models (vocab 256) print text; GPT-2 vocabularies print text "
               "and take --prompt text through GPT-2's tokenizer (encoder.json + vocab.bpe in --tokenizer-dir), "
               "else they print the token ids.",
               "sample_gpt"};
  Args a;
  app.add_option("--checkpoint", a.checkpoint, "a train_gpt checkpoint (DIR/step_N.safetensors) or a Hugging Face "
                 "GPT-2 model.safetensors")->required()->check(CLI::ExistingFile);
  app.add_option("--config", a.config_path, "the model's shape as JSON (default: config.json next to the checkpoint, "
                 "which train_gpt writes; else --model)");
  apps::add_model_flags(app, a.shape, "preset when there is no config.json");
  app.add_option("--prompt", a.prompt, "prompt text (byte-level models, or GPT-2 vocabularies with the tokenizer; "
                 "default: a newline / <|endoftext|>)");
  app.add_option("--prompt-ids", a.prompt_ids, "prompt as comma-separated token ids (any vocabulary; GPT-2's "
                 "default: <|endoftext|>)");
  app.add_option("--tokens,-n", a.tokens, "tokens to generate")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--temperature", a.temperature, "softmax temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--top-k", a.top_k, "sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--seed", a.seed, "sampling seed")->capture_default_str();
  app.add_option("--tokenizer-dir", a.tokenizer_dir, "GPT-2 vocabularies: folder holding encoder.json and vocab.bpe "
                 "(scripts/get-gpt2-tokenizer.sh)")->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads (0: OMP_NUM_THREADS or all cores)");
  app.add_option("--device", a.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_flag("--no-kv-cache", a.no_kv_cache, "recompute the whole context (the last block_size tokens) for every "
               "token instead");
  app.add_flag("--no-verify", a.no_verify, "load a train_gpt checkpoint without checking its data against its "
               "stored checksum (by default a corrupt checkpoint is an error)");
  return apps::run_main(app, argc, argv, apps::AppMainOptions("sample_gpt").newline_before_error(true),
                        [&] { return run(a); });
}
