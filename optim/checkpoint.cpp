// Training checkpoints (Note [Checkpoint format] in checkpoint.h): assembling the safetensors
// file, a 64-bit content hash, and a load that validates everything before restoring anything.
#include <kiln/optim/checkpoint.h>

#include <charconv>
#include <cstring>
#include <map>
#include <set>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>
#include <kiln/core/io/safetensors.h>
#include <kiln/core/profiler/profiler.h>

namespace kiln::optim {

namespace {

constexpr const char* kFormat = "kiln.checkpoint";

// A 64-bit hash of byte strings fed in order (FNV-style on 8-byte words, then a final mix).
class Hasher {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      mix(w);
    }
    uint64_t tail = 0;
    if (i < n) std::memcpy(&tail, p + i, n - i);
    mix(tail ^ (static_cast<uint64_t>(n) << 1));  // the length separates "ab"+"c" from "a"+"bc"
  }
  std::string hex() const {
    uint64_t x = h_;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    char buf[17];
    for (int k = 15; k >= 0; --k, x >>= 4) buf[k] = "0123456789abcdef"[x & 15];
    buf[16] = 0;
    return buf;
  }

 private:
  void mix(uint64_t w) {
    h_ = (h_ ^ w) * 0x100000001b3ull;
    h_ ^= h_ >> 29;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

std::string checksum(const NamedTensors& tensors) {
  Hasher h;
  for (const auto& [name, t] : tensors) {
    Tensor c = t.to(Device::cpu()).contiguous();
    h.update(name.data(), name.size());
    if (c.nbytes()) h.update(c.data_ptr(), c.nbytes());
  }
  return h.hex();
}

template <class Int>
Int parse_number(const std::string& path, const std::map<std::string, std::string>& meta, const std::string& key) {
  auto it = meta.find(key);
  KILN_CHECK_IO(it != meta.end(), "load_checkpoint: ", path, ": metadata '", key, "' is missing");
  Int v{};
  const std::string& s = it->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK_IO(ec == std::errc() && end == s.data() + s.size() && !s.empty(), "load_checkpoint: ", path,
                ": metadata '", key, "' is not a valid integer: '", s, "'");
  return v;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

void save_checkpoint(const std::string& path, const NamedTensors& model, const Optimizer& optimizer,
                     const TrainingProgress& progress) {
  save_checkpoint(path, model, optimizer.state_dict(), optimizer.name(), progress);
}

void save_checkpoint(const std::string& path, const NamedTensors& model, const NamedTensors& optimizer_state,
                     const std::string& optimizer_name, const TrainingProgress& progress) {
  profiler::Range range("save checkpoint", profiler::Category::checkpoint);
  NamedTensors tensors;
  std::set<std::string> names;
  for (const auto& [name, t] : model) {
    KILN_CHECK_VALUE(t.defined(), "save_checkpoint: ", path, ": model tensor '", name, "' is undefined");
    KILN_CHECK_VALUE(names.insert(name).second, "save_checkpoint: ", path, ": model tensor name '", name,
                     "' appears twice");
    tensors.emplace_back("model." + name, t.detach());
  }
  for (const auto& [key, t] : optimizer_state) tensors.emplace_back("optimizer." + key, t);
  Tensor cursor = empty({static_cast<int64_t>(progress.data_cursor.size())}, DType::u8);
  if (!progress.data_cursor.empty())
    std::memcpy(cursor.data_ptr(), progress.data_cursor.data(), progress.data_cursor.size());
  tensors.emplace_back("data_cursor", cursor);
  std::set<std::string> extra_names;
  for (const auto& [name, t] : progress.extra) {
    KILN_CHECK_VALUE(t.defined(), "save_checkpoint: ", path, ": extra tensor '", name, "' is undefined");
    KILN_CHECK_VALUE(extra_names.insert(name).second, "save_checkpoint: ", path, ": extra tensor name '", name,
                     "' appears twice");
    tensors.emplace_back("extra." + name, t.detach());
  }

  std::map<std::string, std::string> meta;
  meta["format"] = kFormat;
  meta["format_version"] = std::to_string(kCheckpointFormatVersion);
  meta["optimizer"] = optimizer_name;
  meta["global_step"] = std::to_string(progress.global_step);
  meta["scheduler_step"] = std::to_string(progress.scheduler_step);
  meta["rng.count"] = std::to_string(progress.rng.size());
  for (size_t i = 0; i < progress.rng.size(); ++i) {
    meta["rng." + std::to_string(i) + ".seed"] = std::to_string(progress.rng[i].seed);
    meta["rng." + std::to_string(i) + ".offset"] = std::to_string(progress.rng[i].offset);
  }
  meta["checksum"] = checksum(tensors);
  save_safetensors(path, tensors, meta);
}

SafetensorsFile load_verified_checkpoint(const std::string& path, const char* who) {
  SafetensorsFile file;
  try {
    file = load_safetensors(path);
  } catch (const Error& e) {
    KILN_FAIL_IO(who, ": ", path, ": not a readable checkpoint (truncated or corrupt?): ", e.what());
  }
  verify_loaded_checkpoint(file, path, who);
  return file;
}

void verify_loaded_checkpoint(const SafetensorsFile& file, const std::string& path, const char* who) {
  const auto& meta = file.metadata;
  auto format = meta.find("format");
  KILN_CHECK_IO(format != meta.end() && format->second == kFormat, who, ": ", path,
                ": not a Kiln checkpoint (metadata 'format' is ",
                format == meta.end() ? std::string("missing") : "'" + format->second + "'", ")");
  const int version = parse_number<int>(path, meta, "format_version");
  KILN_CHECK_IO(version == kCheckpointFormatVersion, who, ": ", path, ": format version ", version,
                " is not supported (this Kiln reads version ", kCheckpointFormatVersion, ")");
  auto sum = meta.find("checksum");
  KILN_CHECK_IO(sum != meta.end(), who, ": ", path, ": metadata 'checksum' is missing");
  const std::string actual = checksum(file.tensors);
  KILN_CHECK_IO(actual == sum->second, who, ": ", path, ": checksum mismatch (stored ", sum->second,
                ", data hashes to ", actual, "): the file is corrupt");
}

void verify_checkpoint(const std::string& path) { (void)load_verified_checkpoint(path, "verify_checkpoint"); }

TrainingProgress load_checkpoint(const std::string& path, const NamedTensors& model, Optimizer& optimizer) {
  profiler::Range range("load checkpoint", profiler::Category::checkpoint);
  const SafetensorsFile file = load_verified_checkpoint(path, "load_checkpoint");
  const auto& meta = file.metadata;
  auto opt_name = meta.find("optimizer");
  KILN_CHECK_IO(opt_name != meta.end() && opt_name->second == optimizer.name(), "load_checkpoint: ", path,
                ": holds the state of a ", opt_name == meta.end() ? std::string("(missing)") : opt_name->second,
                " optimizer, not of a ", optimizer.name());

  // Split the tensors by prefix; anything else is unexpected.
  std::map<std::string, Tensor> model_in;
  NamedTensors optim_in;
  Tensor cursor;
  NamedTensors extra_in;
  for (const auto& [name, t] : file.tensors) {
    if (starts_with(name, "model."))
      model_in.emplace(name.substr(6), t);
    else if (starts_with(name, "optimizer."))
      optim_in.emplace_back(name.substr(10), t);
    else if (name == "data_cursor")
      cursor = t;
    else if (starts_with(name, "extra."))
      extra_in.emplace_back(name.substr(6), t);
    else
      KILN_FAIL_IO("load_checkpoint: ", path, ": unexpected tensor '", name, "'");
  }
  std::set<std::string> expected;
  for (const auto& [name, t] : model) {
    expected.insert(name);
    auto it = model_in.find(name);
    KILN_CHECK_IO(it != model_in.end(), "load_checkpoint: ", path, ": model tensor '", name, "' is missing");
    KILN_CHECK_IO(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(), "load_checkpoint: ", path,
                  ": model tensor '", name, "' is ", it->second.dtype(), it->second.shape(), " in the file but ",
                  t.dtype(), t.shape(), " in the model");
  }
  for (const auto& [name, t] : model_in)
    KILN_CHECK_IO(expected.count(name), "load_checkpoint: ", path, ": unexpected model tensor '", name,
                  "' (not in the model)");
  KILN_CHECK_IO(cursor.defined() && cursor.dtype() == DType::u8 && cursor.dim() == 1, "load_checkpoint: ", path,
                ": 'data_cursor' is missing or not a 1-D u8 tensor");
  try {
    optimizer.validate_state_dict(optim_in);
  } catch (const Error& e) {
    KILN_FAIL_IO("load_checkpoint: ", path, ": optimizer state does not fit: ", e.what());
  }
  TrainingProgress progress;
  progress.global_step = parse_number<int64_t>(path, meta, "global_step");
  progress.scheduler_step = parse_number<int64_t>(path, meta, "scheduler_step");
  const auto rng_count = parse_number<uint64_t>(path, meta, "rng.count");
  KILN_CHECK_IO(rng_count <= 1024, "load_checkpoint: ", path, ": metadata 'rng.count' is ", rng_count);
  for (uint64_t i = 0; i < rng_count; ++i)
    progress.rng.push_back({parse_number<uint64_t>(path, meta, "rng." + std::to_string(i) + ".seed"),
                            parse_number<uint64_t>(path, meta, "rng." + std::to_string(i) + ".offset")});
  progress.extra = std::move(extra_in);
  progress.data_cursor.assign(static_cast<const char*>(cursor.data_ptr()), static_cast<size_t>(cursor.numel()));

  // Everything checked: restore.
  optimizer.load_state_dict(optim_in);
  NoGradGuard no_grad;
  for (const auto& [name, t] : model) {
    Tensor dst = t;
    dst.copy_(model_in.at(name));
  }
  return progress;
}

}  // namespace kiln::optim
