// A fused, chunked LM head + cross entropy: cross_entropy(linear(x, weight)[..., :classes], targets)
// without the (N, classes) logits or their gradient ever existing whole. See Note [Chunked LM head].
#pragma once

#include <cstdint>

#include <kiln/autograd/ops/loss.h>
#include <kiln/core/tensor.h>

namespace kiln {

/// Options of linear_cross_entropy: the cross entropy's options plus how the classes and the
/// chunks are taken.
struct LinearCrossEntropyOptions {
  int64_t ignore_index_ = -100;
  int64_t classes_ = -1;     ///< the first `classes` rows of weight are the classes; -1: all of them
  int64_t chunk_rows_ = 0;   ///< tokens per chunk; 0: as many as keep one chunk's logits near 256 MiB
  Reduction reduction_ = Reduction::mean;  ///< mean (over non-ignored rows) or sum
  LinearCrossEntropyOptions& ignore_index(int64_t v) { ignore_index_ = v; return *this; }
  LinearCrossEntropyOptions& classes(int64_t v) { classes_ = v; return *this; }
  LinearCrossEntropyOptions& chunk_rows(int64_t v) { chunk_rows_ = v; return *this; }
  LinearCrossEntropyOptions& reduction(Reduction r) { reduction_ = r; return *this; }
};

/// Note [Chunked LM head]
/// x (..., C), weight (V, C) (an untied or tied head; no bias), targets (...) of class ids in
/// [0, classes) or ignore_index. Equal to cross_entropy(linear(x, weight).slice(-1, 0, classes),
/// targets) with torch's mean-over-counted-rows semantics, under autocast too (the GEMMs in the low
/// dtype, the loss in f32). The tokens are taken `chunk_rows` at a time: logits of one chunk, its
/// loss and, when a gradient is needed, its logits' gradient and from it the chunk's part of dx and
/// dW, all in the forward (the loss's gradient is a scalar, so they only need scaling later: the
/// Liger-kernel idea). The backward multiplies the saved dx and dW by the incoming gradient (and
/// 1 / count for the mean). So the peak holds one chunk's logits and their gradient, plus dx (N, C)
/// and dW (V, C, f32 at least), never (N, V); the GEMM work is the unfused path's (one forward, two
/// backward products). Rows of weight past `classes` get zero gradient, as the sliced logits give.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            const LinearCrossEntropyOptions& options = {});

}  // namespace kiln
