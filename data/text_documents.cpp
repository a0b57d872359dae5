// Input files of a text corpus and their GPT-2 documents (text_documents.h).
#include <kiln/data/text_documents.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <kiln/core/error.h>

namespace kiln::data {

namespace fs = std::filesystem;

std::vector<std::string> list_text_files(const std::vector<std::string>& files, const std::vector<std::string>& dirs) {
  std::vector<std::string> out = files;
  for (const auto& d : dirs) {
    KILN_CHECK_IO(fs::is_directory(d), "text corpus: ", d, " is not a directory");
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(d); it != fs::recursive_directory_iterator(); ++it) {
      if (it->path().filename().string().rfind('.', 0) == 0) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path().string());
    }
    KILN_CHECK_IO(!found.empty(), "text corpus: directory ", d, " holds no files");
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK_IO(in.good(), "text corpus: cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  KILN_CHECK_IO(!in.bad(), "text corpus: cannot read ", path);
  return ss.str();
}

std::vector<uint16_t> encode_gpt2_documents(const std::vector<std::string>& files, const Gpt2Tokenizer& tokenizer,
                                            int threads, const std::function<void(const DocumentProgress&)>& progress) {
  std::vector<uint16_t> tokens;
  const auto start = std::chrono::steady_clock::now();
  DocumentProgress p;
  p.files_total = files.size();
  for (size_t f = 0; f < files.size();) {
    std::vector<std::string> texts;
    size_t batch_bytes = 0;
    for (; f < files.size() && batch_bytes < (size_t(16) << 20); ++f) {
      texts.push_back(read_text_file(files[f]));
      batch_bytes += texts.back().size();
    }
    std::vector<std::string_view> docs;
    for (const auto& t : texts) {
      std::string_view rest(t);
      for (size_t at; (at = rest.find(kEndOfTextString)) != std::string_view::npos;
           rest.remove_prefix(at + kEndOfTextString.size()))
        if (at > 0) docs.push_back(rest.substr(0, at));
      if (!rest.empty()) docs.push_back(rest);
    }
    for (const auto& ids : tokenizer.encode_batch(docs, threads)) {
      tokens.push_back(uint16_t(kGpt2EndOfText));
      tokens.insert(tokens.end(), ids.begin(), ids.end());  // ids < 50257 fit uint16
    }
    p.files_done = f;
    p.documents += docs.size();
    p.bytes += batch_bytes;
    p.tokens = tokens.size();
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (progress) progress(p);
  }
  return tokens;
}

}  // namespace kiln::data
