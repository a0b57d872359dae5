// Safetensors: bitwise round trips of every dtype, strided tensors and metadata; the byte
// layout checked by hand; atomic overwrite; and each kind of corrupt file, written byte by byte,
// failing with a message that names the path and the problem.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace kiln;
using kiln::test::at;
using kiln::test::values;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() / ("kiln_safetensors_" + std::to_string(::getpid()) + "_" +
                                       std::to_string(counter++));
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// 8-byte little-endian length, then the header text, then the data bytes.
std::string file_bytes(const std::string& header, const std::string& data, uint64_t n = UINT64_MAX) {
  if (n == UINT64_MAX) n = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string raw(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

}  // namespace

TEST_CASE("round trip of every dtype is bitwise, in order, with metadata") {
  TempDir tmp;
  const std::string path = tmp.file("model.safetensors");
  std::vector<std::pair<std::string, Tensor>> in;
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8, DType::b8})
    in.emplace_back(std::string("t_") + dtype_name(dt), test::random({3, 5}, dt, ++seed, -100, 100));
  // Specials survive bitwise.
  in.emplace_back("specials", from_vector<float>({-0.0f, std::numeric_limits<float>::infinity(),
                                                  std::numeric_limits<float>::quiet_NaN(), 1e-40f},
                                                 {4}));
  Tensor base = test::random({4, 6, 2}, DType::f64, 99);
  Tensor strided = base.transpose(0, 2).slice(1, 0, 6, 2);  // (2, 3, 4), non-contiguous
  REQUIRE_FALSE(strided.is_contiguous());
  in.emplace_back("strided", strided);
  in.emplace_back("scalar", scalar_tensor(3.25, DType::f32));
  in.emplace_back("empty", zeros({0, 3}, DType::bf16));
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "1200"}};

  save_safetensors(path, in, meta);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  SafetensorsFile f = load_safetensors(path);
  CHECK(f.path == path);
  CHECK(f.metadata == meta);
  REQUIRE(f.tensors.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto& [name, t] = f.tensors[i];
    CHECK(name == in[i].first);  // the order we saved in
    CHECK(t.dtype() == in[i].second.dtype());
    CHECK(t.shape() == in[i].second.shape());
    CHECK(t.is_contiguous());
    CHECK_MESSAGE(raw(t) == raw(in[i].second), name);
  }
  test::for_each_index(strided.shape(), [&](const std::vector<int64_t>& p) {
    REQUIRE(at(f.at("strided"), p) == at(strided, p));
  });
  CHECK(f.contains("t_bf16"));
  CHECK_FALSE(f.contains("nope"));
  CHECK(f.to_map().size() == in.size());
  CHECK_ERROR_CONTAINS(f.at("nope"), path.c_str(), "'nope'");
}

TEST_CASE("the bytes on disk follow the format") {
  TempDir tmp;
  const std::string path = tmp.file("layout.safetensors");
  Tensor a = from_vector<float>({1.5f, -2.0f}, {2});
  Tensor b = from_vector<int32_t>({7, 8, 9, 10, 11, 12}, {3, 2}).t();  // (2, 3) strided
  save_safetensors(path, {{"a", a}, {"b", b}}, {{"k", "v"}});
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(8 + n <= bytes.size());
  CHECK((8 + n) % 8 == 0);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["__metadata__"]["k"] == "v");
  CHECK(header["a"]["dtype"] == "F32");
  CHECK(header["a"]["shape"] == nlohmann::json::array({2}));
  CHECK(header["a"]["data_offsets"] == nlohmann::json::array({0, 8}));
  CHECK(header["b"]["dtype"] == "I32");
  CHECK(header["b"]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(header["b"]["data_offsets"] == nlohmann::json::array({8, 32}));
  CHECK(bytes.size() == 8 + n + 32);
  float fa[2];
  std::memcpy(fa, bytes.data() + 8 + n, 8);
  CHECK(fa[0] == 1.5f);
  CHECK(fa[1] == -2.0f);
  int32_t ib[6];
  std::memcpy(ib, bytes.data() + 8 + n + 8, 24);
  CHECK(std::vector<int32_t>(ib, ib + 6) == std::vector<int32_t>{7, 9, 11, 8, 10, 12});  // row-major of b
}

TEST_CASE("saving replaces an existing file and checks names") {
  TempDir tmp;
  const std::string path = tmp.file("w.safetensors");
  save_safetensors(path, {{"x", ones({100})}});
  save_safetensors(path, {{"y", full({2}, 4.0, DType::i64)}});
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].first == "y");
  CHECK(values(f.tensors[0].second) == std::vector<double>{4, 4});
  CHECK(f.metadata.empty());
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK_ERROR_CONTAINS(save_safetensors(path, {{"x", ones({1})}, {"x", ones({1})}}), path.c_str(), "'x'", "twice");
  CHECK_ERROR_CONTAINS(save_safetensors(path, {{"__metadata__", ones({1})}}), "reserved");
  CHECK_ERROR_CONTAINS(save_safetensors(tmp.file("no/such/dir/f"), {{"x", ones({1})}}), "no/such/dir/f.tmp");
  CHECK(values(load_safetensors(path).at("y")) == std::vector<double>{4, 4});  // failed saves left it alone
}

TEST_CASE("corrupt files fail naming the path and the problem") {
  TempDir tmp;
  int k = 0;
  // Writes `bytes` to a fresh file and returns its path.
  auto put = [&](const std::string& bytes) {
    std::string p = tmp.file("bad" + std::to_string(k++) + ".safetensors");
    write_bytes(p, bytes);
    return p;
  };
  const std::string data24(24, '\1');
  std::string p;

  p = put(std::string("\x05\0\0\0\0", 5));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "5 bytes", "shorter than the 8-byte");

  p = put(file_bytes("{}", "", 1000));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "header length 1000", "byte offset 0", "past the end");

  p = put(file_bytes("{}", "", uint64_t(1) << 40));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "header length 1099511627776", "absurd");

  p = put(file_bytes(R"({"a": {"dtype": "F32", "shape": [2], )", data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "does not parse", "byte offset");

  p = put(file_bytes("[1, 2]", ""));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "expected an object");

  p = put(file_bytes(R"({"a": {"dtype": "F8", "shape": [2], "data_offsets": [0, 2]}})", data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'a'", "unknown dtype 'F8'");

  p = put(file_bytes(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'w'", "needs 24 bytes", "hold 20");

  const std::string hdr_out = R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [4, 28]}})";
  p = put(file_bytes(hdr_out, data24));
  const std::string end_offset = "byte offset " + std::to_string(8 + hdr_out.size() + 28);
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'w'", "outside the data section of 24 bytes",
                       end_offset.c_str());

  const std::string hdr_ov = R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},)"
                             R"( "b": {"dtype": "I32", "shape": [3], "data_offsets": [8, 20]}})";
  p = put(file_bytes(hdr_ov, data24));
  const std::string ov_offset = "byte offset " + std::to_string(8 + hdr_ov.size() + 8);
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'a'", "'b'", "overlap", ov_offset.c_str());

  p = put(file_bytes(R"({"n": {"dtype": "F32", "shape": [-2, 3], "data_offsets": [0, 24]}})", data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'n'", "negative", "[-2,3]");

  p = put(file_bytes(R"({"n": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'n'", "data_offsets", "non-negative");

  p = put(file_bytes(R"({"n": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 24]}})",
                     data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'n'", "needs more bytes");

  p = put(file_bytes(R"({"__metadata__": {"step": 3}})", ""));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "metadata 'step'", "not a string");

  p = put(file_bytes(R"({"m": {"shape": [1], "data_offsets": [0, 4]}})", data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'m'", "dtype");

  // Found by fuzz_safetensors: a number too large for a double is nlohmann's out_of_range, not a
  // parse error; it must still be a kiln::IOError.
  p = put(file_bytes(R"({"n": {"dtype": "F32", "shape": [1e666], "data_offsets": [0, 4]}})", data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "header JSON cannot be read", "number overflow");
  CHECK_THROWS_AS(load_safetensors(p), IOError);

  // A zero-size tensor whose other dims multiply past int64 (its strides would overflow).
  p = put(file_bytes(R"({"z": {"dtype": "F32", "shape": [0, 4294967296, 4294967296], "data_offsets": [0, 0]}})",
                     data24));
  CHECK_ERROR_CONTAINS(load_safetensors(p), p.c_str(), "'z'", "[0,4294967296,4294967296]");

  const std::string missing = tmp.file("missing.safetensors");
  CHECK_ERROR_CONTAINS(load_safetensors(missing), missing.c_str(), "cannot open");

  // A well-formed file written by hand loads, and bool bytes are normalised to 0/1.
  p = put(file_bytes(R"({"b": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})", std::string("\0\1\7", 3)));
  CHECK(values(load_safetensors(p).at("b")) == std::vector<double>{0, 1, 1});
}
