// Safetensors reader and writer over POSIX file calls. The reader validates the whole header
// before allocating any tensor, then preads each tensor's bytes into its own storage (the file
// is never held in memory twice); the writer goes through a ".tmp" file, fsync and rename.
#include <kiln/core/io/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>

namespace kiln {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using Json = nlohmann::ordered_json;  // keeps the header's key order

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // a larger header is a corrupt file

constexpr std::pair<DType, const char*> kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},
    {DType::i64, "I64"}, {DType::i32, "I32"}, {DType::u8, "U8"},     {DType::b8, "BOOL"}};

const char* safetensors_name(DType t) {
  for (auto [d, name] : kDTypeNames)
    if (d == t) return name;
  return "?";
}

bool parse_dtype(const std::string& s, DType& out) {
  for (auto [d, name] : kDTypeNames)
    if (s == name) {
      out = d;
      return true;
    }
  return false;
}

// Closes the descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string os_error() { return std::strerror(errno); }

// Reads exactly n bytes at `offset`; false on a short read.
bool pread_all(int fd, void* buf, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// One tensor's header entry, checked against the data section's size.
Entry parse_entry(const std::string& path, const std::string& name, const Json& v, uint64_t data_start,
                  uint64_t data_size) {
  const std::string where = "load_safetensors: " + path + ": tensor '" + name + "'";
  KILN_CHECK_IO(v.is_object(), where, ": header entry is not a JSON object: ", v.dump());
  Entry e{name, DType::f32, {}, 0, 0};
  auto dt = v.find("dtype");
  KILN_CHECK_IO(dt != v.end() && dt->is_string(), where, ": missing or non-string \"dtype\"");
  KILN_CHECK_IO(parse_dtype(dt->get<std::string>(), e.dtype), where, ": unknown dtype '", dt->get<std::string>(),
                "' (Kiln reads F32, F64, BF16, F16, I64, I32, U8, BOOL)");
  auto sh = v.find("shape");
  KILN_CHECK_IO(sh != v.end() && sh->is_array(), where, ": missing or non-array \"shape\"");
  uint64_t numel = 1;
  uint64_t extent = 1;  // the product of the dims taken as at least 1: the largest stride
  for (const Json& d : *sh) {
    KILN_CHECK_IO(d.is_number_integer(), where, ": shape ", sh->dump(), " holds a non-integer dim");
    KILN_CHECK_IO(!(d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)) && d.get<int64_t>() >= 0,
                  where, ": shape ", sh->dump(), " has a negative or huge dim");
    const int64_t n = d.get<int64_t>();
    KILN_CHECK_IO(n == 0 || numel <= data_size / uint64_t(n), where, ": shape ", sh->dump(),
                  " needs more bytes than the data section's ", data_size);
    // A zero-size tensor holds no bytes, but its strides must still fit int64.
    const uint64_t at_least_one = std::max<uint64_t>(uint64_t(n), 1);
    KILN_CHECK_IO(extent <= uint64_t(INT64_MAX) / at_least_one, where, ": shape ", sh->dump(),
                  " has dims whose product overflows int64");
    extent *= at_least_one;
    numel *= uint64_t(n);
    e.shape.push_back(n);
  }
  auto off = v.find("data_offsets");
  KILN_CHECK_IO(off != v.end() && off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() &&
                 (*off)[1].is_number_unsigned(),
                where, ": \"data_offsets\" must be two non-negative integers, got ",
                off == v.end() ? std::string("nothing") : off->dump());
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  KILN_CHECK_IO(e.begin <= e.end && e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end,
                "] lie outside the data section of ", data_size, " bytes (file bytes ", data_start, " to ",
                data_start + data_size, "); the tensor would end at byte offset ", data_start + e.end);
  const uint64_t need = numel * dtype_size(e.dtype);
  KILN_CHECK_IO(e.end - e.begin == need, where, ": shape ", e.shape, " of ", safetensors_name(e.dtype), " needs ", need,
                " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " (at byte offset ",
                data_start + e.begin, ")");
  return e;
}

}  // namespace

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  KILN_FAIL_IO("safetensors: ", path, " holds no tensor named '", name, "' (", tensors.size(), " tensors)");
  return tensors.front().second;  // unreachable
}

std::map<std::string, Tensor> SafetensorsFile::to_map() const {
  return std::map<std::string, Tensor>(tensors.begin(), tensors.end());
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK_VALUE(name != "__metadata__", "save_safetensors: ", path, ": '__metadata__' is reserved, not a tensor name");
    KILN_CHECK_VALUE(!header.contains(name), "save_safetensors: ", path, ": tensor name '", name, "' appears twice");
    check_defined(t, "save_safetensors", name.c_str());
    ops::check_in_storage(t, "save_safetensors", name.c_str());
    header[name] = {{"dtype", safetensors_name(t.dtype())},
                    {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
                    {"data_offsets", {at, at + t.nbytes()}}};
    at += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    KILN_FAIL_IO("save_safetensors: ", path, ": cannot encode the header: ", e.what());
  }
  text.append((8 - (text.size() % 8)) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t n = text.size();

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  KILN_CHECK_IO(f != nullptr, "save_safetensors: cannot create ", tmp, ": ", os_error());
  auto fail = [&](const std::string& what) {
    const std::string err = os_error();
    std::fclose(f);
    std::remove(tmp.c_str());
    KILN_FAIL_IO("save_safetensors: ", what, " ", tmp, " failed: ", err);
  };
  if (std::fwrite(&n, 8, 1, f) != 1 || std::fwrite(text.data(), 1, text.size(), f) != text.size())
    fail("writing the header of");
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    Tensor c = t.to(Device::cpu()).contiguous();
    if (std::fwrite(c.data_ptr(), 1, c.nbytes(), f) != c.nbytes()) fail("writing tensor '" + name + "' to");
  }
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) fail("flushing");
  if (std::fclose(f) != 0) {
    const std::string err = os_error();
    std::remove(tmp.c_str());
    KILN_FAIL_IO("save_safetensors: closing ", tmp, " failed: ", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = os_error();
    std::remove(tmp.c_str());
    KILN_FAIL_IO("save_safetensors: renaming ", tmp, " to ", path, " failed: ", err);
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string where = "load_safetensors: " + path;
  Fd file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK_IO(file.fd >= 0, where, ": cannot open: ", os_error());
  struct stat st {};
  KILN_CHECK_IO(::fstat(file.fd, &st) == 0, where, ": cannot stat: ", os_error());
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  KILN_CHECK_IO(file_size >= 8, where, ": file is ", file_size,
                " bytes, shorter than the 8-byte header length that starts a safetensors file");

  uint64_t n = 0;
  KILN_CHECK_IO(pread_all(file.fd, &n, 8, 0), where, ": cannot read the header length at byte offset 0: ", os_error());
  KILN_CHECK_IO(n <= kMaxHeaderBytes, where, ": header length ", n, " (at byte offset 0) is absurd (over ",
                kMaxHeaderBytes, " bytes); not a safetensors file?");
  KILN_CHECK_IO(n <= file_size - 8, where, ": header length ", n, " (at byte offset 0) runs past the end of the ",
                file_size, "-byte file");
  std::string text(n, '\0');
  KILN_CHECK_IO(pread_all(file.fd, text.data(), n, 8), where, ": cannot read the ", n,
                "-byte header at byte offset 8: ", os_error());

  Json header;
  try {
    header = Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    KILN_FAIL_IO(where, ": header JSON does not parse near byte offset ", 8 + e.byte, " (header byte ", e.byte,
                  "): ", e.what());
  } catch (const nlohmann::json::exception& e) {  // found by fuzz_safetensors: a number past any
    // JSON number type (e.g. 1e666) is out_of_range 406, not a parse_error
    KILN_FAIL_IO(where, ": header JSON cannot be read: ", e.what());
  }
  KILN_CHECK_IO(header.is_object(), where, ": header is JSON ", header.type_name(), ", expected an object");

  const uint64_t data_start = 8 + n, data_size = file_size - data_start;
  SafetensorsFile out;
  out.path = path;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      KILN_CHECK_IO(value.is_object(), where, ": \"__metadata__\" must be an object of strings, got ", value.dump());
      for (const auto& [mk, mv] : value.items()) {
        KILN_CHECK_IO(mv.is_string(), where, ": metadata '", mk, "' is not a string: ", mv.dump());
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, value, data_start, data_size));
  }

  // No two tensors may share bytes.
  std::vector<const Entry*> by_begin;
  for (const Entry& e : entries)
    if (e.end > e.begin) by_begin.push_back(&e);
  std::sort(by_begin.begin(), by_begin.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const Entry& a = *by_begin[i - 1];
    const Entry& b = *by_begin[i];
    KILN_CHECK_IO(b.begin >= a.end, where, ": tensors '", a.name, "' (data_offsets [", a.begin, ", ", a.end, "]) and '",
                  b.name, "' ([", b.begin, ", ", b.end, "]) overlap at byte offset ", data_start + b.begin);
  }

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    errno = 0;
    KILN_CHECK_IO(pread_all(file.fd, t.data_ptr(), t.nbytes(), data_start + e.begin), where, ": cannot read tensor '",
                  e.name, "' (", t.nbytes(), " bytes at byte offset ", data_start + e.begin, "): ",
                  errno ? os_error() : std::string("file ended early"));
    if (e.dtype == DType::b8) {  // any nonzero byte is true; keep bools 0/1 in memory
      auto* p = static_cast<uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace kiln
