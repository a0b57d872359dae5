// Fuzzes read_cifar10_batch (data/cifar10.h): any bytes as a batch file of any whole record count.
// Accepted: one record per 3073 bytes, labels in [0, 10), the pixels exactly the file's bytes.
// scripts/fuzz.sh raises -max_len so inputs can hold a few records.
#include <cstring>

#include <kiln/data/cifar10.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kiln::fuzz::input_path(data, size);
  kiln::fuzz::run_reader([&] {
    using namespace kiln::data;
    Cifar10Dataset d = read_cifar10_batch(path, Cifar10Options().records_per_file(0));
    kiln::fuzz::check(size_t(d.size()) * kCifarRecordBytes == size, "record count does not match the file size");
    const auto* labels = d.labels.data<int64_t>();
    const auto* pixels = d.images.data<uint8_t>();
    for (int64_t r = 0; r < d.size(); ++r) {
      kiln::fuzz::check(labels[r] >= 0 && labels[r] < kCifarClasses && labels[r] == data[r * kCifarRecordBytes],
                        "a label differs from the file or is out of range");
      kiln::fuzz::check(std::memcmp(pixels + r * kCifarImageBytes, data + r * kCifarRecordBytes + 1,
                                    kCifarImageBytes) == 0,
                        "pixels differ from the file");
    }
  });
  return 0;
}
