// GPTKVCache: the GPT forward pass restated for a window of new positions attending to the cached
// ones. The blocks' own modules (ln_1, c_attn, c_proj, ln_2, mlp) do the work; only attention is
// spelled out, because its keys come from the cache.
#include <kiln/models/gpt_kv_cache.h>

#include <cmath>
#include <limits>

#include <kiln/autograd/autograd.h>
#include <kiln/autograd/ops/ops.h>
#include <kiln/core/factory.h>

namespace kiln::models {

GPTKVCache::GPTKVCache(const GPT& model, int64_t batch)
    : model_(&model), batch_(batch), capacity_(model.config().block_size) {
  KILN_CHECK(batch >= 1, "GPTKVCache: batch must be >= 1, got ", batch);
  const GPTConfig& c = model.config();
  const Tensor w = model.lm_head_weight();
  const Shape shape{batch, c.n_head, capacity_, c.n_embd / c.n_head};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    keys_.push_back(zeros(shape, TensorOptions(w.dtype()).device(w.device())));
    values_.push_back(zeros(shape, TensorOptions(w.dtype()).device(w.device())));
  }
}

// x (B, t, C) at positions [length_, length_ + t) -> (B, t, C); writes this window's keys/values.
Tensor GPTKVCache::attention(GPTAttention& attn, const Tensor& x, size_t layer) {
  const GPTConfig& cfg = model_->config();
  const int64_t b = x.size(0), t = x.size(1), c = cfg.n_embd, h = cfg.n_head, d = c / h;
  const int64_t end = length_ + t;
  Tensor qkv = attn.c_attn->forward(x);  // (B, t, 3C)
  auto heads = [&](int64_t i) { return qkv.slice(2, i * c, (i + 1) * c).reshape({b, t, h, d}).transpose(1, 2); };
  keys_[layer].narrow(2, length_, t).copy_(heads(1));
  values_[layer].narrow(2, length_, t).copy_(heads(2));
  Tensor k = keys_[layer].narrow(2, 0, end), v = values_[layer].narrow(2, 0, end);  // (B, H, end, D)
  Tensor att = matmul(heads(0), k.transpose(-2, -1)) * (1.0 / std::sqrt(double(d)));  // (B, H, t, end)
  if (t > 1) {
    // Query i sits at position length_ + i and sees keys 0 .. length_ + i.
    Tensor future = triu(ones({t, end}, TensorOptions(x.device())), length_ + 1).to(DType::b8);
    att = masked_fill(att, future, -std::numeric_limits<double>::infinity());
  }
  Tensor y = matmul(softmax(att, -1), v);  // (B, H, t, D)
  return attn.c_proj->forward(y.transpose(1, 2).reshape({b, t, c}));
}

Tensor GPTKVCache::forward(const Tensor& idx) {
  check_defined(idx, "GPTKVCache::forward", "idx");
  KILN_CHECK(idx.dim() == 2 && idx.size(0) == batch_, "GPTKVCache::forward: idx must be (", batch_,
             ", t), got shape ", idx.shape());
  KILN_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32,
             "GPTKVCache::forward: idx must hold integer token ids, got ", idx.dtype());
  const int64_t t = idx.size(1);
  KILN_CHECK(t >= 1 && length_ + t <= capacity_, "GPTKVCache::forward: ", t, " new positions after ", length_,
             " cached ones exceed block_size = ", capacity_, "; reset() the cache and prefill a shorter context");
  KILN_CHECK(!model_->is_training() || model_->config().dropout == 0.0,
             "GPTKVCache::forward: the model is in training mode with dropout ", model_->config().dropout,
             "; call model.eval() before decoding");
  NoGradGuard no_grad;
  const GPTTransformer& tr = *model_->transformer;
  Tensor pos = arange(double(length_), double(length_ + t), 1.0, TensorOptions(DType::i64).device(idx.device()));
  Tensor x = tr.wte->forward(idx) + tr.wpe->forward(pos);  // (B, t, C)
  for (size_t l = 0; l < keys_.size(); ++l) {
    GPTBlock& block = tr.block(l);
    x = x + attention(*block.attn, block.ln_1->forward(x), l);
    x = x + block.mlp->forward(block.ln_2->forward(x));
  }
  length_ += t;
  return linear(tr.ln_f->forward(x), tr.wte->weight);  // (B, t, padded_vocab_size)
}

}  // namespace kiln::models
