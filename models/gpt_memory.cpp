// The memory formula of a GPT training step (gpt_memory.h). Per token and layer, with e = 4 (f32
// parameters and residual stream; 2 with 16-bit parameters) and l = 2 under autocast or with 16-bit
// parameters (else l = 4), what the graph saves:
//   ln_1 input e*C (+ 8: mean, rstd)   ln_1 output in l (c_attn's input)  l*C
//   q, k, v (views of c_attn's output) 3*l*C
//   attention: flash O + row lse l*C + 4*H; composed (CPU) probabilities l*H*T
//   attention output made contiguous for c_proj l*C
//   ln_2 input (the residual) e*C (+ 8) ln_2 output in l  l*C
//   c_fc output h (gelu_linear keeps only h) 4*l*C
// = 2eC + 10lC + 16 (+ lC + 4H flash | + lHT composed). Recompute keeps instead the checkpointed
// piece's input: e*C per block (block), or e*C in place of that half (attention / mlp).
#include <kiln/models/gpt_memory.h>

#include <algorithm>

namespace kiln::models {

int64_t GPTMemoryEstimate::peak() const {
  return std::max(after_forward() + transient, parameters + optimizer + gradients + end_transient);
}

GPTMemoryEstimate estimate_gpt_training_memory(const GPTConfig& config, int64_t batch, int64_t seq,
                                               const GPTMemoryOptions& o) {
  config.validate();
  const int64_t n = batch * seq, c = config.n_embd, h = config.n_head, layers = config.n_layer, t = seq;
  const int64_t v = config.padded_vocab_size;
  // e: the parameters and the residual stream; l: what the GEMMs make (16-bit under autocast or with
  // 16-bit parameters). copies: autocast keeps 16-bit casts of f32 weights (none of 16-bit ones).
  const int64_t e = int64_t(dtype_size(o.param_dtype)), l = o.autocast || e == 2 ? 2 : 4;
  const bool copies = o.autocast && e == 4;
  const int64_t p = GPT::count_parameters(config);
  const int64_t bias = config.bias ? 1 : 0;
  const int64_t attn_gemm_params = 4 * c * c + bias * 4 * c;  // c_attn, attn.c_proj
  const int64_t mlp_gemm_params = 8 * c * c + bias * 5 * c;   // c_fc, mlp.c_proj
  const int64_t block_gemm_params = attn_gemm_params + mlp_gemm_params;

  GPTMemoryEstimate m;
  m.parameters = e * p;
  m.optimizer = 8 * p + (e == 2 ? 4 * p : 0);
  m.gradients = e * p;

  // Per token, per layer.
  const int64_t attention_extra = o.flash_attention ? l * c + 4 * h : l * h * t;
  const int64_t attn_half = e * c + 8 + l * c + 3 * l * c + attention_extra + l * c;  // ln_1 .. c_proj's input
  const int64_t mlp_half = e * c + 8 + l * c + 4 * l * c;                             // ln_2 .. c_fc's output
  int64_t per_layer = attn_half + mlp_half;
  int64_t recompute_transient = 0;  // the piece re-run in backward, alive with its own activations
  const int64_t block_copies = copies ? l * block_gemm_params : 0;
  switch (o.recompute) {
    case GPTRecompute::none: break;
    case GPTRecompute::block:
      per_layer = e * c;
      recompute_transient = (attn_half + mlp_half) * n + block_copies;
      break;
    case GPTRecompute::attention:
      per_layer = e * c + mlp_half;
      recompute_transient = attn_half * n + (copies ? l * attn_gemm_params : 0);
      break;
    case GPTRecompute::mlp:
      per_layer = attn_half + e * c;
      recompute_transient = mlp_half * n + (copies ? l * mlp_gemm_params : 0);
      break;
  }
  m.activations = per_layer * n * layers + 8 * n + 8 * t;  // + the token ids and positions the embeddings keep
  // Autocast's copies stay as long as a saved product needs them; a checkpointed piece's do not.
  if (copies) {
    const int64_t kept = o.recompute == GPTRecompute::block       ? 0
                         : o.recompute == GPTRecompute::attention ? mlp_gemm_params
                         : o.recompute == GPTRecompute::mlp       ? attn_gemm_params
                                                                  : block_gemm_params;
    m.weight_copies = l * kept * layers;
  }

  // The head: ln_f's input, then either the whole logits or the chunked head's dx and dW.
  const int64_t ln_f = (e * c + 8) * n;
  if (o.fused_head) {
    m.head = ln_f + l * c * n + e * v * c;  // dx (N, C) in l, dW (V, C) in e
    // Its backward scales both into e: dx twice (the cast, the product) and a new dW.
    m.head_transient = 2 * e * c * n + e * v * c;
  } else {
    const int64_t copy = copies ? l * v * c : 0;  // the head weight's 16-bit copy, kept by the product
    m.head = ln_f + l * c * n + l * v * n + 4 * n + copy;  // ln_f's output, logits (N, V), lse
    // dlogits (over the padded columns: cross_entropy's classes writes them whole), dx, and dW in l
    // then in f32.
    m.head_transient = l * v * n + l * c * n + (l + e) * v * c;
  }
  // One block's backward, net of the activations it frees as it goes: the residual's gradient and its
  // layer norm's (e*C each), the MLP's 4C-wide gradient (4*l*C) and the composed attention's (T, T)
  // gradient, plus what recompute re-runs (all of it fresh).
  const int64_t attention_transient = o.flash_attention ? 0 : l * h * t;
  m.block_transient = (2 * e * c + 4 * l * c + attention_transient) * n + recompute_transient;
  m.transient = std::max(m.head_transient, m.block_transient);
  m.end_transient = 2 * e * c * n;  // the embedding sum's gradient and the first block's input's
  return m;
}

GPTParameterLayout gpt_parameter_layout(const GPTConfig& config) {
  config.validate();
  const int64_t c = config.n_embd;
  const bool bias = config.bias;
  GPTParameterLayout out;
  auto add = [&](int64_t numel) { out.numels.push_back(numel); };
  auto linear = [&](int64_t in, int64_t features) {  // weight (features, in), bias (features)
    add(features * in);
    if (bias) add(features);
  };
  auto layer_norm = [&] {
    add(c);
    if (bias) add(c);
  };
  add(config.padded_vocab_size * c);  // wte (also the head)
  add(config.block_size * c);         // wpe
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const size_t first = out.numels.size();
    layer_norm();         // ln_1
    linear(c, 3 * c);     // attn.c_attn
    linear(c, c);         // attn.c_proj
    layer_norm();         // ln_2
    linear(c, 4 * c);     // mlp.c_fc
    linear(4 * c, c);     // mlp.c_proj
    std::vector<size_t> block;
    for (size_t k = first; k < out.numels.size(); ++k) block.push_back(k);
    out.blocks.push_back(std::move(block));
  }
  layer_norm();  // ln_f
  return out;
}

}  // namespace kiln::models
