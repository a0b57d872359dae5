// Incremental decoding for models::GPT: the keys and values of every layer for the tokens seen so
// far, so generating a token costs one position's forward pass instead of the whole context's.
//
//   models::GPTKVCache cache(model, /*batch=*/1);
//   Tensor logits = cache.forward(prompt_ids);    // (1, P, V_pad): prefill
//   logits = cache.forward(next_id);              // (1, 1, V_pad): one step
//
// forward(idx) for tokens at positions [length(), length() + t) gives the logits model.forward()
// gives at those positions for the whole sequence (the test compares them). It runs without
// gradients, in eval mode semantics (no dropout). The cache holds block_size positions; when it is
// full, reset() it and prefill again with the context to keep (sample_gpt keeps the last half).
#pragma once

#include <vector>

#include <kiln/core/tensor.h>
#include <kiln/models/gpt.h>

namespace kiln::models {

/// The keys and values of every layer for the tokens seen so far, for incremental decoding with a
/// GPT (the file's header).
class GPTKVCache {
 public:
  /// Keys and values (batch, n_head, block_size, head_dim) per layer, on the model's device, in the
  /// dtype of its parameters.
  GPTKVCache(const GPT& model, int64_t batch);

  /// idx (batch, t) of token ids for the next t positions -> logits (batch, t, padded_vocab_size).
  Tensor forward(const Tensor& idx);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  void reset() { length_ = 0; }

 private:
  Tensor attention(GPTAttention& attn, const Tensor& x, size_t layer);

  const GPT* model_;
  int64_t batch_, capacity_, length_ = 0;
  std::vector<Tensor> keys_, values_;  ///< per layer (B, H, capacity, D)
};

}  // namespace kiln::models
