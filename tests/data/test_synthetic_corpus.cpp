// SyntheticCorpus: the stream is deterministic and chunking-independent, its empirical conditional
// entropy given the true generating context matches entropy_floor(), and a bigram model stays far
// above the floor (the structure really needs context beyond the previous token).
#include <cmath>
#include <map>

#include "test_util.h"

using namespace kiln;
using namespace kiln::data;

namespace {

// Plug-in conditional entropy H(next | context) in nats from (context, next) pairs.
double conditional_entropy(const std::map<int64_t, std::map<int, int64_t>>& counts) {
  double total = 0, h = 0;
  for (const auto& [ctx, next] : counts) {
    double n_ctx = 0;
    for (const auto& [tok, n] : next) n_ctx += double(n);
    for (const auto& [tok, n] : next) h -= double(n) * std::log(double(n) / n_ctx);
    total += n_ctx;
  }
  return h / total;
}

// The copy candidate of token t as the Note in synthetic_corpus.h defines it (computed here, not
// through the class): lags[x[t-1] % lags.size()] tokens back.
int candidate(const std::vector<uint16_t>& x, size_t t, const std::vector<int64_t>& lags) {
  return x[t - lags[x[t - 1] % lags.size()]];
}

struct Estimates {
  double with_context, bigram, copy_fraction;
};

Estimates estimate(SyntheticCorpus& corpus, int64_t n) {
  std::vector<uint16_t> x = corpus.generate(n);
  const auto& lags = corpus.options().lags();
  std::map<int64_t, std::map<int, int64_t>> by_candidate, by_previous;
  int64_t copies = 0, counted = 0;
  for (size_t t = size_t(corpus.max_lag()); t < x.size(); ++t) {
    int c = candidate(x, t, lags);
    by_candidate[c][x[t]]++;
    by_previous[x[t - 1]][x[t]]++;
    copies += x[t] == c;
    ++counted;
  }
  return {conditional_entropy(by_candidate), conditional_entropy(by_previous), double(copies) / double(counted)};
}

}  // namespace

TEST_CASE("entropy_floor is the closed form of the generating process") {
  // V = 256, noise 0.1: q = 0.9 + 0.1/256; floor = -q ln q - 255 (0.1/256) ln(0.1/256).
  SyntheticCorpus corpus;
  double q = 0.9 + 0.1 / 256, r = 0.1 / 256;
  CHECK(corpus.entropy_floor() == doctest::Approx(-q * std::log(q) - 255 * r * std::log(r)).epsilon(1e-12));
  CHECK(corpus.entropy_floor() == doctest::Approx(0.876).epsilon(1e-3));
  // All noise: the floor is ln V.
  SyntheticCorpus uniform(SyntheticCorpusOptions().vocab_size(16).noise(1.0));
  CHECK(uniform.entropy_floor() == doctest::Approx(std::log(16.0)).epsilon(1e-12));
}

TEST_CASE("the stream is fixed by the seed and independent of chunking") {
  SyntheticCorpusOptions opts = SyntheticCorpusOptions().vocab_size(50).lags({3, 7}).seed(9);
  SyntheticCorpus a(opts), b(opts), c(SyntheticCorpusOptions(opts).seed(10));
  std::vector<uint16_t> whole = a.generate(5000);
  std::vector<uint16_t> parts = b.generate(1234), rest = b.generate(5000 - 1234);
  parts.insert(parts.end(), rest.begin(), rest.end());
  CHECK(whole == parts);
  CHECK(b.position() == 5000);
  CHECK(c.generate(5000) != whole);
  for (uint16_t t : whole) REQUIRE(t < 50);
}

TEST_CASE("the empirical conditional entropy given the true context matches the floor") {
  SyntheticCorpus small(SyntheticCorpusOptions().vocab_size(16).lags({4, 6, 9}).noise(0.2).seed(1));
  Estimates e = estimate(small, 1'000'000);
  CHECK(e.copy_fraction == doctest::Approx(0.8 + 0.2 / 16).epsilon(0.005));
  CHECK(std::fabs(e.with_context - small.entropy_floor()) < 0.01);

  SyntheticCorpus bytes(SyntheticCorpusOptions().seed(2));  // the defaults: V 256, lags {16, 24}
  Estimates d = estimate(bytes, 2'000'000);
  // The plug-in estimate is biased low by about (V - 1) V / (2 n) = 0.016 nats here.
  CHECK(d.with_context == doctest::Approx(bytes.entropy_floor() - 0.016).epsilon(0.01));
}

TEST_CASE("a bigram model cannot reach the floor") {
  SyntheticCorpus small(SyntheticCorpusOptions().vocab_size(16).lags({4, 6, 9}).noise(0.2).seed(3));
  Estimates e = estimate(small, 1'000'000);
  // Given only the previous token the next one is close to uniform: about ln 16 = 2.77 nats,
  // against a floor near 0.99.
  CHECK(e.bigram > 0.97 * std::log(16.0));
  CHECK(e.bigram > small.entropy_floor() + 1.5);
}

TEST_CASE("invalid options and byte-level tokens") {
  CHECK_ERROR_CONTAINS(SyntheticCorpus(SyntheticCorpusOptions().vocab_size(1)), "vocab_size", "got 1");
  CHECK_ERROR_CONTAINS(SyntheticCorpus(SyntheticCorpusOptions().lags({})), "lags");
  CHECK_ERROR_CONTAINS(SyntheticCorpus(SyntheticCorpusOptions().lags({4, 0})), "lag", "got 0");
  CHECK_ERROR_CONTAINS(SyntheticCorpus(SyntheticCorpusOptions().noise(0.0)), "noise", "got 0");
  CHECK(bytes_to_tokens("hi\xc3\xa9") == std::vector<uint16_t>{104, 105, 195, 169});
  CHECK(bytes_to_tokens("").empty());
}
