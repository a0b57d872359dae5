// Fuzzes load_safetensors (core/io/safetensors.h): any bytes as a .safetensors file. Accepted:
// the tensors' bytes fit in the file and do not overlap (their sum is at most the data section),
// and every element can be read.
#include <kiln/core/io/safetensors.h>

#include "fuzz_input.h"

static volatile uint8_t sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kiln::fuzz::input_path(data, size);
  kiln::fuzz::run_reader([&] {
    kiln::SafetensorsFile f = kiln::load_safetensors(path);
    uint64_t bytes = 0;
    for (const auto& [name, t] : f.tensors) {
      kiln::fuzz::check(t.is_contiguous() && t.numel() >= 0, "a loaded tensor is not a fresh contiguous tensor");
      bytes += uint64_t(t.nbytes());
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      uint8_t x = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) x ^= p[i];  // ASan: inside the allocation
      sink = x;
    }
    kiln::fuzz::check(bytes + 8 <= size, "the loaded tensors hold more bytes than the file");
  });
  return 0;
}
