// Test helpers for token shards: a scratch directory removed at scope exit, raw file writers
// (so malformed shards can be made byte by byte) and a reference token sequence.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::test {

struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("kiln_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Writes a shard by hand: header words as given, then the tokens (independent of write_token_shard).
inline void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                            const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(header.data(), 4, header.size(), f);
  if (!tokens.empty()) std::fwrite(tokens.data(), 2, tokens.size(), f);
  std::fclose(f);
}

// Distinct-looking tokens: token i of shard s is (s * 7919 + i * 31) mod 50000.
inline std::vector<uint16_t> ramp_tokens(int64_t n, int64_t shard) {
  std::vector<uint16_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = uint16_t((shard * 7919 + i * 31) % 50000);
  return t;
}

}  // namespace kiln::test
