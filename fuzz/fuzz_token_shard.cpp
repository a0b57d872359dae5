// Fuzzes TokenShard (data/token_shard.h): any bytes as a shard file. Accepted: the file is exactly
// the 1024-byte header plus 2 bytes per declared token, and every token can be read.
#include <kiln/data/token_shard.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kiln::fuzz::input_path(data, size);
  kiln::fuzz::run_reader([&] {
    kiln::data::TokenShard shard(path);
    kiln::fuzz::check(shard.size() >= 0 && size_t(shard.size()) * 2 + 1024 == size,
                      "an accepted shard's token count does not match the file size");
    uint64_t sum = 0;
    for (uint16_t t : shard.tokens()) sum += t;  // ASan: every token lies inside the mapping
    uint64_t expect = 0;
    for (size_t i = 1024; i + 1 < size; i += 2) expect += uint16_t(data[i] | data[i + 1] << 8);
    kiln::fuzz::check(sum == expect, "the tokens read differ from the file's bytes");
  });
  return 0;
}
