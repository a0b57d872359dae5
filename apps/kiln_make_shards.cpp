// kiln-make-shards: writes llm.c-format token shards (train_000000.bin ..., val_000000.bin ...)
// from the seeded synthetic corpus (printing its entropy floor and writing it to DIR/floor.txt,
// where train_gpt finds it) or from any file as byte-level tokens. Both stream: at most one shard
// of tokens is in memory at a time.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "common/app_main.h"

using namespace kiln;
using namespace kiln::data;

namespace {

using Source = std::function<std::vector<uint16_t>(int64_t n)>;  // the next n tokens

// Writes `count` tokens from `source` as dir/<split>_000000.bin, ... of at most shard_tokens each.
int64_t write_split(const std::filesystem::path& dir, const std::string& split, int64_t count, int64_t shard_tokens,
                    const Source& source) {
  int64_t shards = 0;
  for (int64_t done = 0; done < count; ++shards) {
    int64_t n = std::min(shard_tokens, count - done);
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06lld.bin", split.c_str(), static_cast<long long>(shards));
    write_token_shard((dir / name).string(), source(n));
    done += n;
  }
  return shards;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-make-shards: write llm.c/modded-nanogpt token shards (train_*.bin, val_*.bin) from a seeded "
               "synthetic corpus with a known entropy floor, or from a text file as byte-level tokens (vocab 256). "
               "The first (1 - val-fraction) of the tokens go to train, the rest to val. --synthetic also writes "
               "OUT/floor.txt (the entropy floor in nats/token), which train_gpt reads."};
  bool synthetic = false;
  std::string text, out;
  int64_t tokens = 0, shard_tokens = 100'000'000, vocab = 256;
  uint64_t seed = 0;
  double val_fraction = 0.1, noise = 0.1;
  std::vector<int64_t> lags{16, 24};
  auto* syn = app.add_flag("--synthetic", synthetic,
                           "generate the synthetic corpus (see data/synthetic_corpus.h): each token copies the token "
                           "lag(previous token) places back, or with probability --noise is uniform");
  auto* txt = app.add_option("--text", text, "tokenize this file byte by byte (vocab 256)")->check(CLI::ExistingFile);
  syn->excludes(txt);
  app.add_option("--out", out, "output directory (created if missing)")->required();
  app.add_option("--tokens", tokens, "synthetic: total tokens to generate (train + val)")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "synthetic: seed of the stream")->capture_default_str();
  app.add_option("--val-fraction", val_fraction, "fraction of the tokens written as val_*.bin (the tail)")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  app.add_option("--shard-tokens", shard_tokens, "tokens per shard file (at most 2^31 - 1)")
      ->check(CLI::Range(int64_t(1), int64_t(2147483647)))
      ->capture_default_str();
  app.add_option("--vocab", vocab, "synthetic: vocabulary size")->check(CLI::Range(2, 65536))->capture_default_str();
  app.add_option("--noise", noise, "synthetic: probability that a token is uniform instead of a copy")
      ->check(CLI::Range(1e-9, 1.0))
      ->capture_default_str();
  app.add_option("--lags", lags, "synthetic: comma-separated copy distances, chosen by previous token % count")
      ->delimiter(',')
      ->capture_default_str();
  return kiln::apps::run_main(app, argc, argv, kiln::apps::AppMainOptions("kiln-make-shards"), [&]() -> int {
    KILN_CHECK(synthetic || !text.empty(), "give --synthetic or --text FILE (see --help)");
    KILN_CHECK(!synthetic || tokens > 0, "--synthetic needs --tokens N");
    const std::filesystem::path dir(out);
    std::filesystem::create_directories(dir);

    Source source;
    std::optional<SyntheticCorpus> corpus;
    std::ifstream in;
    if (synthetic) {
      corpus.emplace(SyntheticCorpusOptions().vocab_size(vocab).lags(lags).noise(noise).seed(seed));
      source = [&](int64_t n) { return corpus->generate(n); };
    } else {
      tokens = static_cast<int64_t>(std::filesystem::file_size(text));
      KILN_CHECK(tokens > 0, "--text ", text, " is empty");
      in.open(text, std::ios::binary);
      KILN_CHECK(in.good(), "cannot open --text ", text);
      source = [&](int64_t n) {
        std::string buf(static_cast<size_t>(n), '\0');
        in.read(buf.data(), n);
        KILN_CHECK(in.gcount() == n, "reading ", text, ": expected ", n, " more bytes, got ", in.gcount());
        return bytes_to_tokens(buf);
      };
    }
    const int64_t val_tokens = std::llround(double(tokens) * val_fraction);
    const int64_t train_tokens = tokens - val_tokens;
    int64_t train_shards = write_split(dir, "train", train_tokens, shard_tokens, source);
    int64_t val_shards = write_split(dir, "val", val_tokens, shard_tokens, source);
    std::printf("kiln-make-shards: wrote %lld train shard(s) (%lld tokens) and %lld val shard(s) (%lld tokens) to %s\n",
                static_cast<long long>(train_shards), static_cast<long long>(train_tokens),
                static_cast<long long>(val_shards), static_cast<long long>(val_tokens), dir.string().c_str());
    const std::filesystem::path floor_path = dir / "floor.txt";
    if (synthetic) {
      // First token: the floor in nats/token (train_gpt reads it); the rest says where it came from.
      std::ofstream floor_file(floor_path);
      floor_file << std::setprecision(17) << corpus->entropy_floor() << std::setprecision(6)
                 << " nats/token: entropy floor of the synthetic corpus (kiln-make-shards --vocab " << vocab
                 << " --noise " << noise << " --seed " << seed << ")\n";
      KILN_CHECK(floor_file.good(), "cannot write ", floor_path.string());
    } else {
      std::filesystem::remove(floor_path);  // a floor left by an earlier synthetic run would be wrong
    }
    if (synthetic)
      std::printf("vocab %lld; entropy floor %.6f nats/token (uniform: %.6f)\n", static_cast<long long>(vocab),
                  corpus->entropy_floor(), std::log(double(vocab)));
    else
      std::printf("byte-level tokens from %s, vocab 256\n", text.c_str());
    return 0;
  });
}
