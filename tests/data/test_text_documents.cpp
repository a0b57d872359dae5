// The input files of a text corpus: --text files first as given, then each directory's regular
// files sorted by path with hidden files and folders skipped; a missing or empty directory and an
// unreadable file are IOErrors naming them. (encode_gpt2_documents needs GPT-2's tables: it is
// tested in test_gpt2_tokenizer.cpp.)
#include <fstream>

#include "parallel/temp_dir.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::data;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("list_text_files: files as given, then each directory sorted, hidden entries skipped") {
  test::TempDir t("kiln_text");
  const fs::path root = t.path;
  write(root / "given.txt", "g");
  write(root / "corpus" / "b.txt", "b");
  write(root / "corpus" / "a" / "z.txt", "z");
  write(root / "corpus" / ".hidden.txt", "h");
  write(root / "corpus" / ".git" / "objects.txt", "x");
  write(root / "more" / "c.txt", "c");
  const auto files =
      list_text_files({(root / "given.txt").string()}, {(root / "corpus").string(), (root / "more").string()});
  const std::vector<std::string> want = {(root / "given.txt").string(), (root / "corpus" / "a" / "z.txt").string(),
                                         (root / "corpus" / "b.txt").string(), (root / "more" / "c.txt").string()};
  CHECK(files == want);
  CHECK(read_text_file(files[1]) == "z");
}

TEST_CASE("list_text_files and read_text_file name what is missing") {
  test::TempDir t("kiln_text");
  const fs::path root = t.path;
  fs::create_directories(root / "empty" / ".only_hidden");
  write(root / "empty" / ".only_hidden" / "x.txt", "x");
  CHECK_ERROR_CONTAINS(list_text_files({}, {(root / "empty").string()}), "holds no files", "empty");
  CHECK_ERROR_CONTAINS(list_text_files({}, {(root / "nowhere").string()}), "not a directory", "nowhere");
  CHECK_ERROR_CONTAINS(read_text_file((root / "absent.txt").string()), "cannot open", "absent.txt");
  CHECK_THROWS_AS(read_text_file((root / "absent.txt").string()), IOError);
}
