// Token shards in the llm.c / modded-nanogpt format: a 1024-byte header of 256 little-endian
// int32 (magic 20240520, version 1, token count, rest zero) followed by the uint16 tokens.
// A TokenShard maps one file read-only, so a dataset is never held in RAM; writes are atomic.
// Training reads windows with read() (pread), which turns a file changed under the run into an
// IOError (Note [Shards changed under a run]).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kiln::data {

constexpr int32_t kTokenShardMagic = 20240520;
constexpr int32_t kTokenShardVersion = 1;
constexpr int64_t kTokenShardHeaderBytes = 1024;  ///< 256 int32

/// One shard, memory-mapped read-only. The constructor validates the header (magic at byte 0,
/// version at byte 4, token count at byte 8) and that the file is exactly 1024 + 2 * count bytes;
/// each failure throws kiln::IOError naming the file, the byte offset and the expected/found values.
/// Move-only: the mapping and the file descriptor are released by the destructor, which never throws.
///
/// Note [Shards changed under a run]: a shard truncated in place while a run reads it (a shard
/// rewritten on a shared file system) leaves pages of the mapping with no file behind them, and
/// touching one kills the process with SIGBUS, no message. So the shard keeps its descriptor open
/// and read() copies a window with pread: a short read is an IOError naming the file, the byte
/// offset and the file's size then and at open. A shard replaced by rename (write_token_shard) is
/// no hazard: the descriptor and the mapping keep the old file. data()/tokens() still read the
/// mapping (tools, the open-time token range check): only code that reads a shard while something
/// else may truncate it needs read(). Cost: one pread per window (see token_loader.cpp).
class TokenShard {
 public:
  explicit TokenShard(std::string path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  ///< tokens
  const uint16_t* data() const { return tokens_; }
  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(size_)}; }
  uint16_t operator[](int64_t i) const { return tokens_[i]; }
  /// Copies tokens [first, first + count) into out (count,) with pread. Throws IndexError for a
  /// range outside [0, size()) and IOError naming the file, offset and sizes when the file no
  /// longer holds them (truncated since it was opened) or the read fails.
  void read(int64_t first, int64_t count, uint16_t* out) const;

 private:
  void release() noexcept;

  std::string path_;
  int fd_ = -1;           ///< kept open for read()
  int64_t file_bytes_ = 0;  ///< at open
  void* map_ = nullptr;  ///< the whole file
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;  ///< (size_,) right after the header
  int64_t size_ = 0;
};

/// Writes `tokens` as a shard at `path` atomically: the bytes go to path + ".tmp", are fsync'ed,
/// then renamed over `path`, so a reader never sees a partial shard. At most INT32_MAX tokens.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

}  // namespace kiln::data
