// Safetensors files (the Hugging Face weight format): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw little-endian data. Kiln reads and writes F32 F64 BF16 F16 I64 I32 U8 BOOL.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln {

/// A loaded file. `tensors` keeps the header's order (the order save_safetensors was given);
/// at()/contains() look a name up (a linear scan: files hold hundreds of tensors, not millions).
struct SafetensorsFile {
  std::string path;
  std::vector<std::pair<std::string, Tensor>> tensors;  ///< fresh contiguous CPU tensors
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  const Tensor& at(const std::string& name) const;  ///< fails naming the file and the missing name
  std::map<std::string, Tensor> to_map() const;
};

/// Writes `tensors` in the given order (names unique, not "__metadata__"). Any device, dtype and
/// layout: each tensor is copied to the CPU and made contiguous one at a time while writing.
/// Atomic: the bytes go to path + ".tmp", are flushed to disk, then renamed over `path`, so a
/// crash leaves either the old file or the new one, never half of one.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads the header, validates it whole (sizes, dtypes, shapes against offsets, offsets inside
/// the data section, no overlaps), then reads each tensor's bytes straight into its storage.
/// A bad file fails with kiln::Error naming the path, the problem and the byte offset.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace kiln
