// kiln-tokenize: GPT-2's tokenizer from the shell. Text on stdin -> token ids on stdout
// (--ids, the default), or ids on stdin -> text (--decode), so users and scripts can check what
// kiln-make-shards and sample_gpt see.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "common/app_main.h"

using namespace kiln;

int main(int argc, char** argv) {
  CLI::App app{"kiln-tokenize: GPT-2 byte-level BPE. Reads stdin to its end; --ids (default) writes the token ids "
               "whitespace-separated on one line, --decode reads whitespace-separated ids and writes their text "
               "(bytes, exactly as encoded). Tables: encoder.json + vocab.bpe in --tokenizer-dir "
               "(scripts/get-gpt2-tokenizer.sh fetches them).",
               "kiln-tokenize"};
  bool ids_mode = false, decode_mode = false, special = false, count = false;
  std::string dir = data::gpt2_tokenizer_dir();
  auto* ids_flag = app.add_flag("--ids", ids_mode, "text -> token ids (the default)");
  auto* dec_flag = app.add_flag("--decode", decode_mode, "token ids -> text");
  ids_flag->excludes(dec_flag);
  app.add_flag("--special", special, "--ids: read \"<|endoftext|>\" in the text as the special token 50256 (default: "
               "plain text, as GPT-2's encoder.py and tiktoken's encode_ordinary)");
  app.add_flag("--count", count, "--ids: print only the number of tokens");
  app.add_option("--tokenizer-dir", dir, "folder holding encoder.json and vocab.bpe")->capture_default_str();
  return apps::run_main(app, argc, argv, apps::AppMainOptions("kiln-tokenize"), [&]() -> int {
    const data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(dir);
    std::ios::sync_with_stdio(false);
    if (decode_mode) {
      std::vector<uint32_t> ids;
      for (std::string item; std::cin >> item;) {
        size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(item, &used);
        } catch (const std::exception&) {
        }
        KILN_CHECK(used == item.size() && id >= 0 && id < (long long)tok.vocab_size(), "--decode: \"", item,
                   "\" (input word ", ids.size() + 1, ") is not a token id below ", tok.vocab_size());
        ids.push_back(uint32_t(id));
      }
      const std::string text = tok.decode(ids);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    }
    const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const std::vector<uint32_t> ids = special ? tok.encode_with_special(text) : tok.encode(text);
    if (count) {
      std::printf("%zu\n", ids.size());
      return 0;
    }
    std::string out;
    out.reserve(ids.size() * 6);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  });
}
