// kiln-make-shards: writes llm.c-format token shards (train_000000.bin ..., val_000000.bin ...)
// from the seeded synthetic corpus (printing its entropy floor and writing it to DIR/floor.txt,
// where train_gpt finds it), or from text files as GPT-2 BPE tokens (--tokenizer gpt2) or raw
// bytes (--tokenizer bytes, vocab 256). Synthetic and byte tokens stream (at most one shard in
// memory); GPT-2 tokens are held (2 bytes each) until the val split is known.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "common/app_main.h"
#include "common/text_file.h"

using namespace kiln;
using namespace kiln::data;
namespace fs = std::filesystem;

namespace {

using Source = std::function<std::vector<uint16_t>(int64_t n)>;  // the next n tokens

// Writes `count` tokens from `source` as dir/<split>_000000.bin, ... of at most shard_tokens each.
int64_t write_split(const fs::path& dir, const std::string& split, int64_t count, int64_t shard_tokens,
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

// Entropy in nats/token of the tokens' own unigram distribution: the loss of the best model that
// ignores context (and sees the answer's counts), so a model below it has learned context.
double unigram_entropy(std::span<const uint16_t> tokens) {
  if (tokens.empty()) return 0;
  std::vector<int64_t> counts(65536, 0);
  for (uint16_t t : tokens) ++counts[t];
  double h = 0, n = double(tokens.size());
  for (int64_t c : counts)
    if (c > 0) h -= double(c) / n * std::log(double(c) / n);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-make-shards: write llm.c/modded-nanogpt token shards (train_*.bin, val_*.bin) from a seeded "
               "synthetic corpus with a known entropy floor, or from text files (--text/--dir) as GPT-2 BPE tokens "
               "(--tokenizer gpt2: each document starts with <|endoftext|>) or bytes (--tokenizer bytes, vocab 256). "
               "The first (1 - val-fraction) of the tokens go to train, the rest to val. --synthetic also writes "
               "OUT/floor.txt (the entropy floor in nats/token), which train_gpt reads; text writes "
               "OUT/unigram_entropy.txt (the val tokens' unigram entropy in nats/token)."};
  bool synthetic = false;
  std::vector<std::string> texts, dirs;
  std::string out, tokenizer = "bytes", tokenizer_dir = gpt2_tokenizer_dir();
  int64_t tokens = 0, shard_tokens = 100'000'000, vocab = 256;
  int threads = 0;
  uint64_t seed = 0;
  double val_fraction = 0.1, noise = 0.1;
  std::vector<int64_t> lags{16, 24};
  auto* syn = app.add_flag("--synthetic", synthetic,
                           "generate the synthetic corpus (see data/synthetic_corpus.h): each token copies the token "
                           "lag(previous token) places back, or with probability --noise is uniform");
  auto* txt = app.add_option("--text", texts, "text files to tokenize, in order (each one a document)")
                  ->check(CLI::ExistingFile);
  auto* dir = app.add_option("--dir", dirs, "tokenize every file under this folder (recursively, sorted by path)")
                  ->check(CLI::ExistingDirectory);
  syn->excludes(txt)->excludes(dir);
  app.add_option("--tokenizer", tokenizer, "text: gpt2 (GPT-2 BPE, vocab 50257) or bytes (vocab 256)")
      ->check(CLI::IsMember({"gpt2", "bytes"}))->capture_default_str();
  app.add_option("--tokenizer-dir", tokenizer_dir, "gpt2: folder holding encoder.json and vocab.bpe "
                 "(scripts/get-gpt2-tokenizer.sh)")->capture_default_str();
  app.add_option("--threads", threads, "gpt2: encoding threads (0: all cores)")->check(CLI::NonNegativeNumber);
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
    KILN_CHECK(synthetic || !texts.empty() || !dirs.empty(), "give --synthetic, or --text FILE... / --dir DIR (see --help)");
    KILN_CHECK(!synthetic || tokens > 0, "--synthetic needs --tokens N");
    const fs::path dir(out);
    fs::create_directories(dir);

    Source source;
    std::optional<SyntheticCorpus> corpus;
    std::vector<std::string> files;
    std::vector<uint16_t> held;  // gpt2: all tokens
    size_t file_index = 0;
    std::ifstream in;
    if (synthetic) {
      corpus.emplace(SyntheticCorpusOptions().vocab_size(vocab).lags(lags).noise(noise).seed(seed));
      source = [&](int64_t n) { return corpus->generate(n); };
    } else {
      files = list_text_files(texts, dirs);
      if (tokenizer == "gpt2") {
        held = encode_gpt2_documents(files, Gpt2Tokenizer::load(tokenizer_dir), threads, [](const DocumentProgress& p) {
          std::printf("kiln-make-shards: tokenized %zu/%zu files (%zu documents, %.1f MB) -> %zu tokens, %.2f MB/s\n",
                      p.files_done, p.files_total, p.documents, double(p.bytes) / 1e6, p.tokens,
                      double(p.bytes) / 1e6 / p.seconds);
          std::fflush(stdout);
        });
        tokens = int64_t(held.size());
        source = [&held, pos = int64_t(0)](int64_t n) mutable {
          std::vector<uint16_t> part(held.begin() + pos, held.begin() + pos + n);
          pos += n;
          return part;
        };
      } else {
        tokens = 0;
        for (const auto& f : files) tokens += int64_t(fs::file_size(f));
        // The files' bytes one after another.
        source = [&](int64_t n) {
          std::string buf(static_cast<size_t>(n), '\0');
          for (int64_t got = 0; got < n;) {
            if (!in.is_open() || in.peek() == std::char_traits<char>::eof()) {
              KILN_CHECK(file_index < files.size(), "the --text/--dir files ended ", n - got, " bytes early");
              in = std::ifstream(files[file_index++], std::ios::binary);
              KILN_CHECK(in.good(), "cannot open ", files[file_index - 1]);
              continue;
            }
            in.read(buf.data() + got, n - got);
            got += in.gcount();
          }
          return bytes_to_tokens(buf);
        };
      }
      KILN_CHECK(tokens > 0, "the --text/--dir files are empty");
    }
    const int64_t val_tokens = std::llround(double(tokens) * val_fraction);
    const int64_t train_tokens = tokens - val_tokens;
    int64_t train_shards = write_split(dir, "train", train_tokens, shard_tokens, source);
    int64_t val_shards = write_split(dir, "val", val_tokens, shard_tokens, source);
    std::printf("kiln-make-shards: wrote %lld train shard(s) (%lld tokens) and %lld val shard(s) (%lld tokens) to %s\n",
                static_cast<long long>(train_shards), static_cast<long long>(train_tokens),
                static_cast<long long>(val_shards), static_cast<long long>(val_tokens), dir.string().c_str());
    const fs::path floor_path = dir / "floor.txt", unigram_path = dir / "unigram_entropy.txt";
    fs::remove(synthetic ? unigram_path : floor_path);  // a file left by an earlier run of the other kind would be wrong
    if (synthetic) {
      // First token: the floor in nats/token (train_gpt reads it); the rest says where it came from.
      std::ostringstream floor_text;
      floor_text << std::setprecision(17) << corpus->entropy_floor() << std::setprecision(6)
                 << " nats/token: entropy floor of the synthetic corpus (kiln-make-shards --vocab " << vocab
                 << " --noise " << noise << " --seed " << seed << ")\n";
      apps::write_text_file(floor_path.string(), floor_text.str(), "the entropy floor");
      std::printf("vocab %lld; entropy floor %.6f nats/token (uniform: %.6f)\n", static_cast<long long>(vocab),
                  corpus->entropy_floor(), std::log(double(vocab)));
      return 0;
    }
    // The val tokens' unigram entropy, read back from the shards just written.
    std::vector<uint16_t> val;
    for (int64_t s = 0; s < val_shards; ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "val_%06lld.bin", static_cast<long long>(s));
      TokenShard shard((dir / name).string());
      val.insert(val.end(), shard.tokens().begin(), shard.tokens().end());
    }
    const double h = unigram_entropy(val);
    std::ostringstream unigram_text;
    unigram_text << std::setprecision(17) << h << std::setprecision(6)
                 << " nats/token: unigram entropy of the val tokens (" << val.size() << " tokens, --tokenizer "
                 << tokenizer << ")\n";
    apps::write_text_file(unigram_path.string(), unigram_text.str(), "the unigram entropy");
    std::printf("%s tokens from %zu file(s), vocab %d; val unigram entropy %.4f nats/token\n", tokenizer.c_str(),
                files.size(), tokenizer == "gpt2" ? 50257 : 256, h);
    return 0;
  });
}
