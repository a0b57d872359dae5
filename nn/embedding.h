// Embedding: a (num_embeddings, embedding_dim) lookup table indexed by integer ids, initialised
// N(0, 1) like torch.
#pragma once

#include <cstdint>

#include <kiln/core/generator.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of Embedding: table size, embedding width and the init generator.
struct EmbeddingOptions {
  int64_t num_embeddings_, embedding_dim_;
  Generator* generator_ = nullptr;  ///< init draws; null: the default generator

  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  EmbeddingOptions& generator(Generator& g) { generator_ = &g; return *this; }
};

/// A lookup table of num_embeddings vectors of embedding_dim (torch.nn.Embedding).
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& options);
  Embedding(int64_t num_embeddings, int64_t embedding_dim)
      : Embedding(EmbeddingOptions(num_embeddings, embedding_dim)) {}

  /// ids (...) of i64/i32 -> (..., embedding_dim).
  Tensor forward(const Tensor& ids);
  void reset_parameters(Generator& gen);

  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  EmbeddingOptions options;
  Tensor weight;  ///< (num_embeddings, embedding_dim)
};

}  // namespace kiln::nn
