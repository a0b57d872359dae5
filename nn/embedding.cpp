// Embedding layer: table parameter, N(0, 1) init, id dtype check.
#include <kiln/nn/embedding.h>

#include <kiln/autograd/ops/index.h>
#include <kiln/core/factory.h>
#include <kiln/nn/init.h>

namespace kiln::nn {

Embedding::Embedding(const EmbeddingOptions& opts) : options(opts) {
  KILN_CHECK_VALUE(options.num_embeddings_ > 0 && options.embedding_dim_ > 0, "Embedding: num_embeddings (",
                   options.num_embeddings_, ") and embedding_dim (", options.embedding_dim_, ") must be positive");
  weight = register_parameter("weight", empty({options.num_embeddings_, options.embedding_dim_}));
  reset_parameters(generator_or_default(options.generator_));
}

void Embedding::reset_parameters(Generator& gen) { init::normal_(weight, 0.0, 1.0, gen); }

Tensor Embedding::forward(const Tensor& ids) {
  check_defined(ids, "Embedding::forward", "ids");
  KILN_CHECK_VALUE(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, "Embedding(num_embeddings=",
                   options.num_embeddings_, ", embedding_dim=", options.embedding_dim_,
                   "): expected integer ids (i64 or i32), got ", ids.dtype(), " of shape ", ids.shape());
  return kiln::embedding(weight, ids);
}

std::string Embedding::extra_repr() const {
  return detail::str_cat(options.num_embeddings_, ", ", options.embedding_dim_);
}

}  // namespace kiln::nn
