// GPTKVCache: incremental decoding must give the logits of the full forward pass at every
// position (prefill of several tokens, then one token at a time; batch > 1), refuse to overflow
// block_size, and start over after reset().
#include "test_util.h"

using namespace kiln;
using models::GPT;
using models::GPTConfig;
using models::GPTKVCache;

namespace {

GPTConfig small_config() {
  return {.vocab_size = 100, .padded_vocab_size = 128, .block_size = 12, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

}  // namespace

TEST_CASE("prefill + token-by-token decoding equals the full forward at every position") {
  GPT model(models::GPTOptions(small_config()).seed(7));
  model.to(DType::f64);
  model.eval();
  const int64_t B = 2, T = 12;
  Tensor idx = (test::random({B, T}, DType::f64, 3, 0.0, 100.0)).to(DType::i64);
  Tensor full;
  {
    NoGradGuard no_grad;
    full = model.forward(idx);  // (B, T, 128)
  }
  for (int64_t prefill : {1, 5, 12}) {
    CAPTURE(prefill);
    GPTKVCache cache(model, B);
    std::vector<Tensor> parts{cache.forward(idx.narrow(1, 0, prefill).contiguous())};
    for (int64_t p = prefill; p < T; ++p) parts.push_back(cache.forward(idx.narrow(1, p, 1).contiguous()));
    CHECK(cache.length() == T);
    Tensor got = cat(parts, 1);
    test::check_close(got, test::values(full), 1e-10, 1e-10, "cached logits");
  }
}

TEST_CASE("the cache refuses to overflow block_size and restarts after reset()") {
  GPT model(models::GPTOptions(small_config()).seed(8));
  model.eval();
  GPTKVCache cache(model, 1);
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 10});
  Tensor first = cache.forward(ids);
  CHECK_ERROR_CONTAINS(cache.forward(from_vector<int64_t>({1, 2, 3}, {1, 3})), "exceed block_size = 12", "reset()");
  cache.reset();
  Tensor again = cache.forward(ids);
  CHECK(test::values(again) == test::values(first));
  CHECK_ERROR_CONTAINS(GPTKVCache(model, 2).forward(ids), "idx must be (2, t)");
}

TEST_CASE("decoding in training mode with dropout is refused") {
  GPTConfig c = small_config();
  c.dropout = 0.1;
  GPT model(c);
  GPTKVCache cache(model, 1);
  CHECK_ERROR_CONTAINS(cache.forward(from_vector<int64_t>({1}, {1, 1})), "model.eval()");
}
