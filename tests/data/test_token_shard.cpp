// TokenShard: the header and size checks (each error names the file and the problem) and a
// write/read round trip through the atomic writer.
#include <filesystem>

#include "data/shard_fixtures.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::data;

TEST_CASE("write_token_shard round-trips and writes the llm.c layout") {
  test::ScratchDir dir;
  std::string path = dir.file("a.bin");
  std::vector<uint16_t> tokens = test::ramp_tokens(1000, 3);
  tokens[5] = 65535;
  write_token_shard(path, tokens);
  CHECK(std::filesystem::file_size(path) == 1024 + 2 * 1000);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  // The header words, read back by hand.
  FILE* f = std::fopen(path.c_str(), "rb");
  int32_t header[256];
  REQUIRE(std::fread(header, 4, 256, f) == 256);
  std::fclose(f);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == 1000);
  CHECK(header[3] == 0);
  TokenShard shard(path);
  CHECK(shard.path() == path);
  REQUIRE(shard.size() == 1000);
  CHECK(std::vector<uint16_t>(shard.tokens().begin(), shard.tokens().end()) == tokens);
  CHECK(shard[5] == 65535);
  // Moving keeps the mapping valid.
  TokenShard moved(std::move(shard));
  CHECK(moved.size() == 1000);
  CHECK(moved[999] == tokens[999]);
}

TEST_CASE("a shard written by hand (another tool) is read") {
  test::ScratchDir dir;
  std::vector<uint16_t> tokens = test::ramp_tokens(77, 1);
  test::write_raw_shard(dir.file("x.bin"), 20240520, 1, 77, tokens);
  TokenShard shard(dir.file("x.bin"));
  CHECK(std::vector<uint16_t>(shard.tokens().begin(), shard.tokens().end()) == tokens);
}

TEST_CASE("bad headers and sizes name the file and the problem") {
  test::ScratchDir dir;
  std::vector<uint16_t> tokens = test::ramp_tokens(100, 0);
  std::string p = dir.file("bad_magic.bin");
  test::write_raw_shard(p, 12345, 1, 100, tokens);
  CHECK_ERROR_CONTAINS(TokenShard(p), p.c_str(), "bad magic", "byte offset 0", "20240520", "12345");

  p = dir.file("bad_version.bin");
  test::write_raw_shard(p, 20240520, 7, 100, tokens);
  CHECK_ERROR_CONTAINS(TokenShard(p), p.c_str(), "version", "byte offset 4", "expected 1", "found 7");

  p = dir.file("truncated.bin");
  test::write_raw_shard(p, 20240520, 1, 100, std::vector<uint16_t>(tokens.begin(), tokens.begin() + 60));
  CHECK_ERROR_CONTAINS(TokenShard(p), p.c_str(), "100 tokens", "1224 bytes", "1144 bytes", "truncated");

  p = dir.file("lying.bin");  // declares fewer tokens than the file holds
  test::write_raw_shard(p, 20240520, 1, 40, tokens);
  CHECK_ERROR_CONTAINS(TokenShard(p), p.c_str(), "byte offset 8", "40 tokens", "1104 bytes", "1224 bytes",
                       "trailing data");

  p = dir.file("short_header.bin");
  FILE* f = std::fopen(p.c_str(), "wb");
  std::fwrite("abc", 1, 3, f);
  std::fclose(f);
  CHECK_ERROR_CONTAINS(TokenShard(p), p.c_str(), "truncated", "3 bytes", "1024-byte header");

  p = dir.file("missing.bin");
  CHECK_ERROR_CONTAINS(TokenShard(p), p.c_str(), "cannot open");
}

TEST_CASE("read copies a token range with pread; a shard truncated after open is an IOError, not SIGBUS") {
  test::ScratchDir dir;
  std::string p = dir.file("a.bin");
  std::vector<uint16_t> tokens = test::ramp_tokens(1000, 2);
  write_token_shard(p, tokens);
  TokenShard shard(p);
  std::vector<uint16_t> out(10);
  shard.read(990, 10, out.data());
  CHECK(out == std::vector<uint16_t>(tokens.begin() + 990, tokens.end()));
  CHECK_THROWS_AS(shard.read(995, 10, out.data()), IndexError);
  CHECK_THROWS_AS(shard.read(-1, 2, out.data()), IndexError);

  // Truncated in place (not replaced by rename): the mapping has no file behind its tail now.
  std::filesystem::resize_file(p, 1024 + 2 * 500);
  CHECK_THROWS_AS(shard.read(990, 10, out.data()), IOError);
  CHECK_ERROR_CONTAINS(shard.read(990, 10, out.data()), p.c_str(), "byte offset 3004", "tokens [990, 1000)",
                       "has 2024 bytes now", "had 3024 when it was opened");
  shard.read(400, 10, out.data());  // what the file still holds reads fine
  CHECK(out == std::vector<uint16_t>(tokens.begin() + 400, tokens.begin() + 410));
  // The window that crosses the new end: a short read, also named.
  CHECK_ERROR_CONTAINS(shard.read(495, 10, out.data()), p.c_str(), "byte offset 2014", "after 10 bytes");
  // Moving keeps the descriptor.
  TokenShard moved(std::move(shard));
  moved.read(0, 10, out.data());
  CHECK(out == std::vector<uint16_t>(tokens.begin(), tokens.begin() + 10));
}

TEST_CASE("write_token_shard into a missing directory fails naming the path") {
  test::ScratchDir dir;
  std::string p = dir.file("no/such/dir/a.bin");
  CHECK_ERROR_CONTAINS(write_token_shard(p, test::ramp_tokens(10, 0)), p.c_str(), "cannot create");
}
