// bench_tokenizer: GPT-2 BPE encoding speed on a text file, on one thread (MB/s per core, the
// figure the tokenizer is held to: >= 2 MB/s on English) and over documents on N threads.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "common/app_main.h"

using namespace kiln;

int main(int argc, char** argv) {
  CLI::App app{"bench_tokenizer: encode a text file with GPT-2's tokenizer; prints MB/s on one thread (cold and "
               "warm merge cache) and over --threads threads (the file cut into --doc-bytes documents).",
               "bench_tokenizer"};
  std::string file, dir = data::gpt2_tokenizer_dir();
  int threads = 0, repeats = 3;
  size_t doc_bytes = 64 << 10;
  app.add_option("file", file, "text file (e.g. demo/corpus/brown.txt)")->required()->check(CLI::ExistingFile);
  app.add_option("--tokenizer-dir", dir, "folder holding encoder.json and vocab.bpe")->capture_default_str();
  app.add_option("--threads", threads, "threads for the batch run (0: all cores)")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs; the best is reported")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--doc-bytes", doc_bytes, "document size for the batch run")->check(CLI::PositiveNumber)->capture_default_str();
  return apps::run_main(app, argc, argv, apps::AppMainOptions("bench_tokenizer"), [&]() -> int {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    KILN_CHECK(!text.empty(), file, " is empty");
    const auto t0 = std::chrono::steady_clock::now();
    const data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(dir);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double mb = double(text.size()) / 1e6;
    auto best_of = [&](auto&& fn) {
      double best = 1e30;
      for (int r = 0; r < repeats; ++r) {
        const auto s = std::chrono::steady_clock::now();
        fn();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
      }
      return best;
    };
    size_t n_tokens = 0;
    const double cold = best_of([&] { n_tokens = tok.encode(text).size(); });  // a fresh cache per call
    data::BpeCache cache;
    tok.encode(text, &cache);
    const double warm = best_of([&] { tok.encode(text, &cache); });
    std::vector<std::string_view> docs;
    for (size_t i = 0; i < text.size(); i += doc_bytes) docs.push_back(std::string_view(text).substr(i, doc_bytes));
    const double batch = best_of([&] { tok.encode_batch(docs, threads); });
    std::printf("bench_tokenizer: %s, %.2f MB, %zu tokens (%.2f bytes/token); tables loaded in %.2f s\n", file.c_str(),
                mb, n_tokens, double(text.size()) / double(n_tokens), load_s);
    std::printf("  1 thread, cold cache: %.2f MB/s\n  1 thread, warm cache: %.2f MB/s\n", mb / cold, mb / warm);
    std::printf("  encode_batch, %d threads, %zu documents: %.2f MB/s\n",
                threads > 0 ? threads : int(std::thread::hardware_concurrency()), docs.size(), mb / batch);
    return 0;
  });
}
