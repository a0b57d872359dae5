// GPT: presets, the GPT-2 modules' forward passes, GPT-2/nanoGPT initialisation and parameter
// counting (closed form, checked against the allocated model in tests/models/test_gpt.cpp).
#include <kiln/models/gpt.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include <kiln/autograd/checkpoint.h>
#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/ops/ops.h>
#include <kiln/core/factory.h>
#include <kiln/nn/init.h>

namespace kiln::models {

void GPTConfig::validate() const {
  KILN_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0,
             "GPTConfig: vocab_size (", vocab_size, "), block_size (", block_size, "), n_layer (", n_layer,
             "), n_head (", n_head, ") and n_embd (", n_embd, ") must be positive");
  KILN_CHECK(padded_vocab_size >= vocab_size, "GPTConfig: padded_vocab_size (", padded_vocab_size,
             ") must be >= vocab_size (", vocab_size, ")");
  KILN_CHECK(n_embd % n_head == 0, "GPTConfig: n_embd (", n_embd, ") must be divisible by n_head (", n_head, ")");
  KILN_CHECK(dropout >= 0.0 && dropout < 1.0, "GPTConfig: dropout must be in [0, 1), got ", dropout);
}

namespace {

struct Preset {
  const char* name;
  GPTConfig config;
};

const std::vector<Preset>& presets() {
  // {vocab_size, padded_vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias}
  static const std::vector<Preset> kPresets = {
      {"gpt-tiny", {256, 256, 128, 4, 4, 128, 0.0, true}},
      {"gpt2-124m", {50257, 50304, 1024, 12, 12, 768, 0.0, true}},
      {"gpt2-350m", {50257, 50304, 1024, 24, 16, 1024, 0.0, true}},
      {"gpt2-774m", {50257, 50304, 1024, 36, 20, 1280, 0.0, true}},
      {"gpt-1.3b", {50304, 50304, 2048, 24, 16, 2048, 0.0, true}},
  };
  return kPresets;
}

}  // namespace

std::vector<std::string> gpt_config_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

GPTConfig gpt_config(const std::string& name) {
  std::string known;
  for (const auto& p : presets()) {
    if (name == p.name) return p.config;
    known += known.empty() ? p.name : std::string(", ") + p.name;
  }
  KILN_FAIL("gpt_config: unknown preset '", name, "'; the presets are: ", known);
  return {};
}

// ---- modules ----

namespace {

std::shared_ptr<nn::Linear> make_linear(int64_t in, int64_t out, const GPTConfig& config, Generator& init_gen) {
  return std::make_shared<nn::Linear>(nn::LinearOptions(in, out).bias(config.bias).generator(init_gen));
}

std::shared_ptr<nn::Embedding> make_embedding(int64_t rows, int64_t dim, Generator& init_gen) {
  return std::make_shared<nn::Embedding>(nn::EmbeddingOptions(rows, dim).generator(init_gen));
}

}  // namespace

GPTAttention::GPTAttention(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen)
    : config_(config), dropout_gen_(&dropout_gen) {
  const int64_t c = config.n_embd;
  c_attn = register_module("c_attn", make_linear(c, 3 * c, config, init_gen));
  c_proj = register_module("c_proj", make_linear(c, c, config, init_gen));
}

Tensor GPTAttention::forward(const Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = config_.n_embd, h = config_.n_head, d = c / h;
  Tensor qkv = c_attn->forward(x);  // (B, T, 3C)
  // One split node: the backward fills one (B, T, 3C) gradient (autograd/ops/join.cpp).
  std::vector<Tensor> parts = split(qkv, c, 2);  // 3 x (B, T, C) views
  auto heads = [&](int64_t i) { return parts[i].reshape({b, t, h, d}).transpose(1, 2); };
  Tensor q = heads(0), k = heads(1), v = heads(2);  // (B, H, T, D)
  parts.clear();
  const bool drop = is_training() && config_.dropout > 0.0;
  Tensor y;
  if (drop) {
    // Attention-probability dropout needs the probabilities, which the fused op keeps inside:
    // spell the same math out (causal mask, softmax, dropout, weighted sum).
    Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(d)));  // (B, H, T, T)
    Tensor future = triu(ones({t, t}, TensorOptions(x.device())), 1).to(DType::b8);
    att = softmax(masked_fill(att, future, -std::numeric_limits<double>::infinity()), -1);
    y = matmul(dropout(att, config_.dropout, true, *dropout_gen_), v);
  } else {
    y = scaled_dot_product_attention(q, k, v, /*causal=*/true);
  }
  y = c_proj->forward(y.transpose(1, 2).reshape({b, t, c}));  // (B, T, C)
  return dropout(y, config_.dropout, drop, *dropout_gen_);
}

GPTMLP::GPTMLP(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen)
    : config_(config), dropout_gen_(&dropout_gen) {
  const int64_t c = config.n_embd;
  c_fc = register_module("c_fc", make_linear(c, 4 * c, config, init_gen));
  c_proj = register_module("c_proj", make_linear(4 * c, c, config, init_gen));
}

Tensor GPTMLP::forward(const Tensor& x) {
  // Both keep only x and c_fc's output for the backward, not the GELU's as well.
  // linear_gelu_linear also runs c_fc's bias and GELU in the GEMM's epilogue on CUDA (Note [Fused
  // bias-GELU epilogue]); behind its switch (fused_gelu_epilogue): the first GPU run (an H200) found it
  // correct but no faster than the composition (1.00-1.03x on the MLP's forward + backward).
  Tensor y = fused_gelu_epilogue()
                 ? linear_gelu_linear(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias)
                 : gelu_linear(c_fc->forward(x), c_proj->weight, c_proj->bias, GeluApproximate::tanh);
  return dropout(y, config_.dropout, is_training() && config_.dropout > 0.0, *dropout_gen_);
}

GPTBlock::GPTBlock(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen) : dropout_gen_(&dropout_gen) {
  auto ln = [&] { return std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({config.n_embd}).bias(config.bias)); };
  ln_1 = register_module("ln_1", ln());
  attn = register_module("attn", std::make_shared<GPTAttention>(config, dropout_gen, init_gen));
  ln_2 = register_module("ln_2", ln());
  mlp = register_module("mlp", std::make_shared<GPTMLP>(config, dropout_gen, init_gen));
}

Tensor GPTBlock::forward(const Tensor& x) {
  // The block lives as long as the model, which must outlive the backward pass.
  auto attn_half = [this](const Tensor& in) { return attn->forward(ln_1->forward(in)); };
  auto mlp_half = [this](const Tensor& in) { return mlp->forward(ln_2->forward(in)); };
  const bool recording = grad_mode_enabled();
  Tensor a = recording && recompute_ == GPTRecompute::attention ? autograd::checkpoint(attn_half, x, {dropout_gen_})
                                                                  : attn_half(x);
  if (recording && recompute_ == GPTRecompute::mlp) {  // the checkpoint starts at the sum: keep them apart
    Tensor y = x + a;
    a = Tensor();
    return y + autograd::checkpoint(mlp_half, y, {dropout_gen_});
  }
  // The residual add and ln_2 in one pass, forward and backward (Note [Fused residual add]).
  AddLayerNormOutput y = add_layer_norm(x, a, ln_2->options.normalized_shape_, ln_2->weight, ln_2->bias,
                                        ln_2->options.eps_);
  a = Tensor();
  Tensor m = mlp->forward(y.out);
  return y.sum + m;
}

GPTTransformer::GPTTransformer(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen) {
  wte = register_module("wte", make_embedding(config.padded_vocab_size, config.n_embd, init_gen));
  wpe = register_module("wpe", make_embedding(config.block_size, config.n_embd, init_gen));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config.n_layer; ++i) h->push_back(std::make_shared<GPTBlock>(config, dropout_gen, init_gen));
  ln_f = register_module(
      "ln_f", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({config.n_embd}).bias(config.bias)));
}

GPTBlock& GPTTransformer::block(size_t i) const { return *h->at<GPTBlock>(i); }

// ---- GPT ----

GPT::GPT(const GPTOptions& options)
    : config_(options.config_),
      dropout_gen_(std::make_unique<Generator>(options.seed_ ^ 0xD80D80D80ull)),
      fused_head_(options.fused_head_) {
  config_.validate();
  // The layers' own default init is drawn from a scratch generator (never the process default)
  // and then overwritten by reset_parameters.
  Generator scratch(options.seed_);
  transformer = register_module("transformer", std::make_shared<GPTTransformer>(config_, *dropout_gen_, scratch));
  Generator own(options.seed_);
  reset_parameters(options.generator_ ? *options.generator_ : own);
  set_recompute(options.recompute_);
}

void GPT::set_recompute(GPTRecompute mode) {
  recompute_ = mode;
  const bool half = mode == GPTRecompute::attention || mode == GPTRecompute::mlp;
  for (size_t i = 0; i < transformer->h->size(); ++i)
    transformer->block(i).set_half_recompute(half ? mode : GPTRecompute::none);
}

GPTRecompute parse_gpt_recompute(const std::string& name) {
  if (name == "none" || name == "off") return GPTRecompute::none;
  if (name == "block" || name == "on") return GPTRecompute::block;
  if (name == "attention" || name == "attn") return GPTRecompute::attention;
  if (name == "mlp") return GPTRecompute::mlp;
  KILN_FAIL("unknown recompute mode '", name, "'; the modes are: none, block, attention, mlp");
  return GPTRecompute::none;
}

const char* gpt_recompute_name(GPTRecompute mode) {
  switch (mode) {
    case GPTRecompute::none: return "none";
    case GPTRecompute::block: return "block";
    case GPTRecompute::attention: return "attention";
    case GPTRecompute::mlp: return "mlp";
  }
  return "?";
}

// GPT-2 / nanoGPT: every Linear and Embedding weight ~ N(0, 0.02), biases 0, LayerNorms 1 and 0,
// and the residual projections (attn.c_proj, mlp.c_proj) ~ N(0, 0.02 / sqrt(2 * n_layer)) so the
// residual stream's variance does not grow with depth. Drawn in named_parameters() order.
void GPT::reset_parameters(Generator& gen) {
  const double std_resid = 0.02 / std::sqrt(2.0 * double(config_.n_layer));
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (auto& [name, p] : named_parameters()) {
    const bool is_ln = name.find(".ln_") != std::string::npos;
    if (is_ln) {
      if (ends_with(name, ".weight")) nn::init::ones_(p);
      else nn::init::zeros_(p);
    } else if (ends_with(name, ".bias")) {
      nn::init::zeros_(p);
    } else if (ends_with(name, "c_proj.weight")) {
      nn::init::normal_(p, 0.0, std_resid, gen);
    } else {
      nn::init::normal_(p, 0.0, 0.02, gen);
    }
  }
}

Tensor GPT::forward(const Tensor& idx) {
  return linear(hidden(idx), transformer->wte->weight);  // (B, T, padded_vocab_size), Note [Tied LM head]
}

Tensor GPT::hidden(const Tensor& idx) {
  check_defined(idx, "GPT::forward", "idx");
  KILN_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32,
             "GPT::forward: idx must hold integer token ids (i64 or i32), got ", idx.dtype());
  KILN_CHECK(idx.dim() == 2, "GPT::forward: idx must be (B, T), got shape ", idx.shape());
  const int64_t t = idx.size(1);
  KILN_CHECK(t >= 1 && t <= config_.block_size, "GPT::forward: sequence length ", t,
             " must be in [1, block_size = ", config_.block_size, "]");
  Tensor pos = arange(double(t), TensorOptions(DType::i64).device(idx.device()));  // (T)
  Tensor x = transformer->wte->forward(idx) + transformer->wpe->forward(pos);      // (B, T, C)
  x = dropout(x, config_.dropout, is_training() && config_.dropout > 0.0, *dropout_gen_);
  for (const auto& module : *transformer->h) {
    GPTBlock* block = static_cast<GPTBlock*>(module.get());
    if (recompute_ == GPTRecompute::block && grad_mode_enabled()) {
      // The block lives as long as the model, which must outlive the backward pass.
      // nn::call runs the block's forward hooks (an FSDP unit gathers there), in the recompute too.
      x = autograd::checkpoint([block](const Tensor& in) { return nn::call(*block, in); }, x, {dropout_gen_.get()});
    } else {
      x = nn::call(*block, x);
    }
  }
  return transformer->ln_f->forward(x);  // (B, T, C)
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  check_defined(targets, "GPT::loss", "targets");
  KILN_CHECK(targets.shape() == idx.shape(), "GPT::loss: targets of shape ", targets.shape(),
             " must match idx of shape ", idx.shape());
  if (uses_fused_head(fused_head_, idx.device()))  // Note [Chunked LM head]: the (B, T, V) logits never exist whole
    return linear_cross_entropy(hidden(idx), transformer->wte->weight, targets,
                                LinearCrossEntropyOptions().classes(config_.vocab_size).ignore_index(-1));
  // Note [Padded vocabulary]: the loss reads the first vocab_size columns in place.
  return cross_entropy(forward(idx), targets, CrossEntropyOptions().ignore_index(-1).classes(config_.vocab_size));
}

int64_t GPT::num_parameters(bool non_embedding) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  if (non_embedding) n -= transformer->wpe->weight.numel();
  return n;
}

std::vector<GPTParamGroup> GPT::param_groups(double weight_decay) const {
  std::vector<GPTParamGroup> groups{{{}, weight_decay}, {{}, 0.0}};
  for (const Tensor& p : parameters()) groups[p.dim() >= 2 ? 0 : 1].params.push_back(p);
  return groups;
}

int64_t GPT::count_parameters(const GPTConfig& config) {
  config.validate();
  const int64_t c = config.n_embd, b = config.bias ? 1 : 0;
  // Per block: ln_1, ln_2 (C weights, C biases each); c_attn 3C^2 + 3C; attn.c_proj C^2 + C;
  // c_fc 4C^2 + 4C; mlp.c_proj 4C^2 + C.
  const int64_t per_block = 12 * c * c + 2 * c + b * (2 * c + 3 * c + c + 4 * c + c);
  return config.padded_vocab_size * c + config.block_size * c + config.n_layer * per_block + c + b * c;
}

std::string format_parameter_count(int64_t n) {
  char buf[64];
  const double v = double(n);
  if (n >= 1000000000) std::snprintf(buf, sizeof(buf), "%.2fB", v / 1e9);
  else if (n >= 1000000) std::snprintf(buf, sizeof(buf), "%.2fM", v / 1e6);
  else if (n >= 1000) std::snprintf(buf, sizeof(buf), "%.2fK", v / 1e3);
  else std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(n));
  return buf;
}

void GPT::print_num_parameters(std::ostream& os) const {
  const int64_t n = num_parameters(), ne = num_parameters(true);
  std::string digits = std::to_string(n), grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  os << "number of parameters: " << format_parameter_count(n) << " (" << grouped << "; non-embedding "
     << format_parameter_count(ne) << ")\n";
}

std::string GPT::extra_repr() const {
  return detail::str_cat("vocab_size=", config_.vocab_size, ", padded_vocab_size=", config_.padded_vocab_size,
                         ", block_size=", config_.block_size, ", n_layer=", config_.n_layer, ", n_head=",
                         config_.n_head, ", n_embd=", config_.n_embd, ", dropout=", config_.dropout,
                         ", bias=", config_.bias ? "true" : "false");
}

}  // namespace kiln::models
