// GPT: the GPT-2 architecture (pre-LN transformer, learned positions, GELU-tanh MLP, tied LM
// head) with Hugging Face GPT-2 parameter names, so checkpoints move to and from HF (gpt_hf.h).
// Configs come from named presets (gpt_config) sized like GPT-2 124M ... 1.3B, plus a tiny one.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/core/generator.h>
#include <kiln/nn/container.h>
#include <kiln/nn/embedding.h>
#include <kiln/nn/linear.h>
#include <kiln/nn/module.h>
#include <kiln/nn/normalization.h>

namespace kiln::models {

/// Note [Padded vocabulary]
/// The token table has padded_vocab_size rows (GPT-2: 50257 padded to 50304, a multiple of 128,
/// for faster matmuls, as llm.c and nanoGPT do). Rows >= vocab_size are never looked up by real
/// tokens; forward() returns logits over all padded_vocab_size columns, and loss() takes the
/// softmax over the first vocab_size columns only (CrossEntropyOptions::classes: read in place, no
/// copy of the slice), so padded columns never receive probability and their wte rows get no
/// gradient from the head. HF files hold vocab_size rows.
struct GPTConfig {
  int64_t vocab_size = 50257;         ///< real tokens
  int64_t padded_vocab_size = 50304;  ///< rows of wte (>= vocab_size), see Note [Padded vocabulary]
  int64_t block_size = 1024;          ///< context length (rows of wpe)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;  ///< embeddings, attention probabilities and residual branches
  bool bias = true;      ///< biases in Linear and LayerNorm (GPT-2: true)

  /// Fails (kiln::Error with the values) on a config the model cannot be built from.
  void validate() const;

  /// The model's shape as a JSON object (models/gpt_config_json.cpp): vocab_size,
  /// padded_vocab_size, block_size, n_layer, n_head, n_embd, bias, and dropout when it is not 0.
  /// indent < 0: one line. train_gpt writes it as DIR/config.json; sample_gpt reads it back.
  std::string to_json(int indent = -1) const;
  /// The inverse: the six sizes are required integers, bias and dropout optional (defaults above).
  /// A malformed text or a missing field is a kiln::Error naming `origin` (e.g. the file) and the key.
  static GPTConfig from_json(const std::string& text, const std::string& origin = "GPT config");
};

/// Presets by name:
///   "gpt-tiny"  : 4 layers, 4 heads, 128 dims, context 128, byte-level vocab 256 (no padding);
///                 842,496 parameters. For tests and the CPU demo.
///   "gpt2-124m" : 12 layers, 12 heads, 768 dims, context 1024, vocab 50257 -> 50304.
///   "gpt2-350m" : 24 layers, 16 heads, 1024 dims, context 1024, vocab 50257 -> 50304.
///   "gpt2-774m" : 36 layers, 20 heads, 1280 dims, context 1024, vocab 50257 -> 50304.
///   "gpt-1.3b"  : 24 layers, 16 heads, 2048 dims, context 2048, vocab 50304 (no padding).
/// An unknown name fails listing the presets.
GPTConfig gpt_config(const std::string& name);
std::vector<std::string> gpt_config_names();

/// What GPT re-runs in backward instead of keeping (activation checkpointing, GPT::set_recompute):
///   none       keep every activation;
///   block      keep each block's input only, re-run the whole block (the most memory saved);
///   attention  re-run ln_1 and attention (the T-sized attention and q/k/v activations go);
///   mlp        re-run ln_2 and the MLP (the 4C-wide fc and GELU activations go).
enum class GPTRecompute { none, block, attention, mlp };
/// "none", "block", "attention" / "attn", "mlp" (and "off"/"on" for none/block); anything else
/// fails naming the choices.
GPTRecompute parse_gpt_recompute(const std::string& name);
const char* gpt_recompute_name(GPTRecompute mode);

/// Whether GPT::loss computes the LM head and cross entropy chunk by chunk (Note [Chunked LM
/// head], autograd/ops/linear_cross_entropy.h): auto = on for CPU tensors, where it was measured at
/// least as fast, and off on CUDA, where the first GPU run (an H200) measured gpt2-124m's step 0.74x
/// as fast with it (docs/cuda.md, "Switches").
enum class GPTFusedHead { automatic, on, off };
/// Whether `mode` computes the head chunk by chunk for tensors on `device`.
inline bool uses_fused_head(GPTFusedHead mode, Device device) {
  return mode == GPTFusedHead::on || (mode == GPTFusedHead::automatic && device.is_cpu());
}

/// How a GPT is built: its config, the seed or generator of its init and dropout.
struct GPTOptions {
  GPTConfig config_;
  KILN_ARG(uint64_t, seed) = 1337;            ///< init draws (without a generator) and dropout masks
  Generator* generator_ = nullptr;  ///< init draws from here when set
  GPTRecompute recompute_ = GPTRecompute::none;  ///< see GPT::set_recompute
  KILN_ARG(GPTFusedHead, fused_head) = GPTFusedHead::automatic;

  explicit GPTOptions(GPTConfig config) : config_(config) {}
  GPTOptions& generator(Generator& g) { generator_ = &g; return *this; }
  GPTOptions& recompute(GPTRecompute mode) { recompute_ = mode; return *this; }
  GPTOptions& recompute(bool on) { recompute_ = on ? GPTRecompute::block : GPTRecompute::none; return *this; }
};

/// One optimizer group of GPT::param_groups: these parameters share this weight decay.
struct GPTParamGroup {
  std::vector<Tensor> params;
  double weight_decay = 0;
};

// The building blocks take the generator their dropouts draw masks from and one for the
// layers' default init (GPT::reset_parameters then redraws every parameter).

/// `transformer.h.<i>.attn`: c_attn (C -> 3C, q|k|v), causal attention over n_head heads, c_proj.
class GPTAttention : public nn::Module {
 public:
  GPTAttention(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen);
  /// x (B, T, C) -> (B, T, C).
  Tensor forward(const Tensor& x);
  std::string name() const override { return "GPTAttention"; }

  std::shared_ptr<nn::Linear> c_attn, c_proj;

 private:
  GPTConfig config_;
  Generator* dropout_gen_;
};

/// `transformer.h.<i>.mlp`: c_fc (C -> 4C), GELU (tanh approximation), c_proj (4C -> C).
class GPTMLP : public nn::Module {
 public:
  GPTMLP(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen);
  Tensor forward(const Tensor& x);
  std::string name() const override { return "GPTMLP"; }

  std::shared_ptr<nn::Linear> c_fc, c_proj;

 private:
  GPTConfig config_;
  Generator* dropout_gen_;
};

/// `transformer.h.<i>`: x + attn(ln_1(x)), then x + mlp(ln_2(x)) (pre-LN).
class GPTBlock : public nn::Module {
 public:
  GPTBlock(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen);
  Tensor forward(const Tensor& x);
  std::string name() const override { return "GPTBlock"; }
  /// attention / mlp: that half runs under autograd::checkpoint while recording (GPT sets this;
  /// block-wide recompute is GPT's own, around nn::call of the block).
  void set_half_recompute(GPTRecompute mode) { recompute_ = mode; }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPTAttention> attn;
  std::shared_ptr<GPTMLP> mlp;

 private:
  Generator* dropout_gen_;
  GPTRecompute recompute_ = GPTRecompute::none;
};

/// The "transformer" child: wte, wpe, h (ModuleList of GPTBlock), ln_f. Holds parameters only;
/// GPT::forward runs it.
class GPTTransformer : public nn::Module {
 public:
  GPTTransformer(const GPTConfig& config, Generator& dropout_gen, Generator& init_gen);
  std::string name() const override { return "GPTTransformer"; }
  GPTBlock& block(size_t i) const;

  std::shared_ptr<nn::Embedding> wte;  ///< (padded_vocab_size, C), also the LM head
  std::shared_ptr<nn::Embedding> wpe;  ///< (block_size, C)
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};

/// Note [Tied LM head]
/// lm_head.weight IS transformer.wte.weight (one tensor, as in nanoGPT and HF GPT-2). It is
/// registered once, under transformer.wte.weight: named_parameters(), state_dict() and
/// save_weights() list it once and there is no "lm_head" module, so optimizers step it once and
/// its gradient sums the embedding lookup's and the head's. load_state_dict() therefore rejects
/// an "lm_head.weight" key (strict); load_gpt_hf() accepts one if it equals wte and drops it.
class GPT : public nn::Module {
 public:
  explicit GPT(const GPTOptions& options);
  explicit GPT(const GPTConfig& config) : GPT(GPTOptions(config)) {}

  /// idx (B, T) of i64/i32 token ids, T <= block_size -> logits (B, T, padded_vocab_size).
  Tensor forward(const Tensor& idx);
  /// Mean cross entropy of forward(idx) against targets (B, T) over the real vocabulary (the
  /// padded columns are sliced off, Note [Padded vocabulary]); targets of -1 are ignored.
  Tensor loss(const Tensor& idx, const Tensor& targets);

  /// The parameters split for AdamW as nanoGPT and llm.c do: group 0 holds every parameter of 2
  /// or more dimensions (the Linear weights, and wte and wpe) with `weight_decay`, group 1 the 1-D
  /// ones (biases, LayerNorm weights and biases) with none; each in named_parameters() order.
  std::vector<GPTParamGroup> param_groups(double weight_decay) const;

  /// Redraws every parameter from `gen` (see the .cpp for GPT-2's init).
  void reset_parameters(Generator& gen);

  /// Parameters held (the tied head counted once). non_embedding: without wpe (nanoGPT's
  /// convention: wte stays, since it is also the head's weight).
  int64_t num_parameters(bool non_embedding = false) const;
  /// The count of a model built from `config`, without allocating: with bias
  /// V_pad*C + T*C + n_layer*(12C^2 + 13C) + 2C, without bias V_pad*C + T*C + n_layer*(12C^2 + 2C) + C.
  static int64_t count_parameters(const GPTConfig& config);
  /// "number of parameters: 124.48M (124,475,904; non-embedding 123.69M)".
  void print_num_parameters(std::ostream& os) const;

  const GPTConfig& config() const { return config_; }  ///< the architecture
  Tensor lm_head_weight() const { return transformer->wte->weight; }  ///< wte's weight (Note [Tied LM head])
  /// Masks for every dropout in the model come from here (seeded by options.seed).
  Generator& dropout_generator() { return *dropout_gen_; }

  /// Activation checkpointing: with recording on, each block (or only its attention or MLP half,
  /// GPTRecompute) runs under autograd::checkpoint, so the graph keeps only that piece's (B, T, C)
  /// input and backward re-runs it (up to a third more compute for a fraction of the activation
  /// memory). Gradients, dropout masks and losses are the same as without it (Note [Checkpoint
  /// recompute]). set_recompute(true) is block.
  void set_recompute(bool on) { set_recompute(on ? GPTRecompute::block : GPTRecompute::none); }
  void set_recompute(GPTRecompute mode);  ///< which pieces are recomputed
  bool recompute() const { return recompute_ != GPTRecompute::none; }  ///< any recomputation on
  GPTRecompute recompute_mode() const { return recompute_; }  ///< which

  /// The chunked LM head + cross entropy in loss() (GPTFusedHead).
  void set_fused_head(GPTFusedHead mode) { fused_head_ = mode; }
  GPTFusedHead fused_head() const { return fused_head_; }  ///< the current mode
  /// The final layer norm's output (B, T, C): forward() without the LM head.
  Tensor hidden(const Tensor& idx);

  std::string name() const override { return "GPT"; }
  std::string extra_repr() const override;

  std::shared_ptr<GPTTransformer> transformer;  ///< wte, wpe, the blocks h and ln_f (HF names)

 private:
  GPTConfig config_;
  std::unique_ptr<Generator> dropout_gen_;  ///< stable address: the blocks hold a pointer
  GPTRecompute recompute_ = GPTRecompute::none;
  GPTFusedHead fused_head_ = GPTFusedHead::automatic;
};

/// "124.48M", "1.32B", "842.50K", "12".
std::string format_parameter_count(int64_t n);

}  // namespace kiln::models
