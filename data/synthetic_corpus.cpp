// SyntheticCorpus: the generator and its exact entropy floor (Note [Synthetic corpus] in the
// header); bytes_to_tokens for byte-level shards.
#include <kiln/data/synthetic_corpus.h>

#include <algorithm>
#include <cmath>

#include <kiln/core/error.h>
#include <kiln/core/generator.h>

namespace kiln::data {

SyntheticCorpus::SyntheticCorpus(SyntheticCorpusOptions options) : options_(std::move(options)) {
  const int64_t V = options_.vocab_size();
  KILN_CHECK(V >= 2 && V <= 65536, "SyntheticCorpus: vocab_size must be in [2, 65536] (uint16 tokens), got ", V);
  KILN_CHECK(!options_.lags().empty(), "SyntheticCorpus: lags must not be empty");
  for (int64_t lag : options_.lags())
    KILN_CHECK(lag >= 1, "SyntheticCorpus: every lag must be >= 1, got ", lag);
  KILN_CHECK(options_.noise() > 0.0 && options_.noise() <= 1.0, "SyntheticCorpus: noise must be in (0, 1], got ",
             options_.noise());
  max_lag_ = *std::max_element(options_.lags().begin(), options_.lags().end());
  history_.assign(static_cast<size_t>(max_lag_), 0);
}

std::vector<uint16_t> SyntheticCorpus::generate(int64_t n) {
  KILN_CHECK(n >= 0, "SyntheticCorpus::generate: n must be >= 0, got ", n);
  const uint64_t V = static_cast<uint64_t>(options_.vocab_size());
  const double noise = options_.noise();
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i, ++position_) {
    const int64_t t = position_;
    auto w = philox4x32({uint32_t(t), uint32_t(uint64_t(t) >> 32), 0u, 0u}, options_.seed());
    const double u = double((uint64_t(w[0]) << 21 ^ (w[1] >> 11)) & ((1ull << 53) - 1)) * 0x1.0p-53;
    const uint16_t uniform = static_cast<uint16_t>((uint64_t(w[2]) << 32 | w[3]) % V);
    uint16_t token = uniform;
    if (t >= max_lag_ && u >= noise) {
      const uint16_t prev = history_[(t - 1) % max_lag_];
      token = history_[(t - lag_for(prev)) % max_lag_];
    }
    history_[t % max_lag_] = token;
    out[i] = token;
  }
  return out;
}

double SyntheticCorpus::entropy_floor() const {
  const double V = double(options_.vocab_size()), p = options_.noise();
  const double q = 1.0 - p + p / V, r = p / V;
  return -q * std::log(q) - (V - 1.0) * r * std::log(r);
}

std::vector<uint16_t> bytes_to_tokens(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  std::transform(text.begin(), text.end(), out.begin(), [](char c) { return uint16_t(static_cast<unsigned char>(c)); });
  return out;
}

}  // namespace kiln::data
