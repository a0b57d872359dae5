// Text corpora as GPT-2 token streams (what kiln-make-shards --tokenizer gpt2 writes): the input
// files, and their documents encoded with <|endoftext|> before each one (Note [Documents in GPT-2
// shards]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <kiln/data/gpt2_tokenizer.h>

namespace kiln::data {

/// `files` as given, then every regular file under each of `dirs` (recursively, sorted by path;
/// hidden files and folders skipped). A dir that holds no file is an error naming it.
std::vector<std::string> list_text_files(const std::vector<std::string>& files, const std::vector<std::string>& dirs);

/// The whole file as bytes; a file that cannot be opened or read is a kiln::IOError naming it.
std::string read_text_file(const std::string& path);

/// Where encode_gpt2_documents is, after each batch of files.
struct DocumentProgress {
  size_t files_done = 0, files_total = 0, documents = 0, bytes = 0, tokens = 0;
  double seconds = 0;  ///< since the start
};

/// Note [Documents in GPT-2 shards]
/// As llm.c's fineweb.py: every document starts with <|endoftext|> (50256), so a shard begins with
/// one and each boundary is marked. A file is one document, and "<|endoftext|>" written in a file
/// also separates documents there (one big text file can hold many; empty pieces are dropped).
/// Documents are encoded on `threads` threads, a batch of files (~16 MB of text) at a time.
std::vector<uint16_t> encode_gpt2_documents(const std::vector<std::string>& files, const Gpt2Tokenizer& tokenizer,
                                            int threads,
                                            const std::function<void(const DocumentProgress&)>& progress = {});

}  // namespace kiln::data
