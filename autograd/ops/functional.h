// Differentiable neural-network functions: softmax family, layer norm, dropout, embedding,
// losses and causal attention.
#pragma once

#include <optional>

#include <kiln/core/generator.h>
#include <kiln/core/tensor.h>

namespace kiln {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Normalizes over the trailing `normalized_shape` dims; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// Zeroes each element with probability p and scales the rest by 1/(1-p) when training; the mask
// comes from `gen` (seeded, reproducible). Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
Tensor dropout(const Tensor& x, double p, bool training);  // the default generator

// weight (V, C), ids (...) of i64/i32 -> (..., C); the gradient sums rows of repeated ids.
Tensor embedding(const Tensor& weight, const Tensor& ids);

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  int64_t ignore_index_ = -100;
  double label_smoothing_ = 0.0;
  Reduction reduction_ = Reduction::mean;
  CrossEntropyOptions& ignore_index(int64_t v) { ignore_index_ = v; return *this; }
  CrossEntropyOptions& label_smoothing(double v) { label_smoothing_ = v; return *this; }
  CrossEntropyOptions& reduction(Reduction r) { reduction_ = r; return *this; }
};
// logits (N, C) (or (..., C), flattened), targets (N) of class ids: a fused log-softmax + NLL,
// with torch's semantics for ignore_index (mean over non-ignored), label_smoothing and reduction.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

// q, k, v (B, H, T, D) -> (B, H, T, D): softmax(q k^T / sqrt(D) [+ causal mask]) v, plain math.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true);

}  // namespace kiln
