// A seeded synthetic token stream whose entropy rate is known exactly and whose structure needs
// context beyond the previous token, so a language model's loss can be compared with the floor
// (and a model without attention cannot reach it). Also byte-level tokenization of text.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::data {

/// SyntheticCorpusOptions().vocab_size(256).lags({16, 24}).noise(0.1).seed(0).
struct SyntheticCorpusOptions {
  SyntheticCorpusOptions& vocab_size(int64_t v) { vocab_size_ = v; return *this; }
  SyntheticCorpusOptions& lags(std::vector<int64_t> v) { lags_ = std::move(v); return *this; }
  SyntheticCorpusOptions& noise(double v) { noise_ = v; return *this; }
  SyntheticCorpusOptions& seed(uint64_t v) { seed_ = v; return *this; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<int64_t>& lags() const { return lags_; }
  double noise() const { return noise_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t vocab_size_ = 256;
  std::vector<int64_t> lags_{16, 24};
  double noise_ = 0.1;
  uint64_t seed_ = 0;
};

/// Note [Synthetic corpus]
/// Token t (t >= max lag) is, with probability 1 - noise, a copy of the token lag(x[t-1]) places
/// back, where lag(b) = lags[b % lags.size()]: the previous token says how far back to look (an
/// induction-like, content-dependent attention pattern). With probability `noise` it is instead
/// uniform over the vocabulary (which may coincide with the copy). The first max-lag tokens are
/// uniform. Given the whole past, the copy candidate c is known, so
///   P(x_t = c | past) = q = 1 - noise + noise / V,  P(x_t = v | past) = noise / V for v != c,
///   entropy_floor = -q ln q - (V - 1) (noise / V) ln(noise / V)   nats/token,
/// exactly, for every t >= max lag. Given only x[t-1], the copied token lies lags back in an
/// independent-looking stream: a bigram model stays near ln V. Draws are Philox by position:
/// token t uses philox4x32({t, t >> 32, 0, 0}, seed), so the stream is the same however it is
/// chunked.
class SyntheticCorpus {
 public:
  explicit SyntheticCorpus(SyntheticCorpusOptions options = {});

  /// The next n tokens of the stream (continues where the previous call stopped).
  std::vector<uint16_t> generate(int64_t n);
  int64_t position() const { return position_; }  ///< tokens generated so far

  /// The conditional entropy of a token given its unbounded past, in nats/token (see the Note).
  double entropy_floor() const;
  /// The lag chosen by previous token `prev`.
  int64_t lag_for(uint16_t prev) const { return options_.lags()[prev % options_.lags().size()]; }
  int64_t max_lag() const { return max_lag_; }
  const SyntheticCorpusOptions& options() const { return options_; }

 private:
  SyntheticCorpusOptions options_;
  int64_t max_lag_ = 0;
  int64_t position_ = 0;
  std::vector<uint16_t> history_;  ///< (max_lag,) ring buffer: token t at t % max_lag
};

/// Byte-level tokens (vocab 256): one token per byte of `text`.
std::vector<uint16_t> bytes_to_tokens(std::string_view text);

}  // namespace kiln::data
