// The kiln::Error hierarchy: each kind is thrown where it belongs (dims and indices, files,
// explicit KILN_CHECK_AS), is still a kiln::Error, and keeps the "message [file:line]" text.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

using namespace kiln;

TEST_CASE("IndexError for dims and indices out of range, still a kiln::Error") {
  Tensor t = zeros({2, 3});
  CHECK_THROWS_AS(t.select(0, 5), IndexError);
  CHECK_THROWS_AS(t.select(3, 0), IndexError);
  CHECK_THROWS_AS(t.narrow(1, 1, 5), IndexError);
  CHECK_THROWS_AS(t.select(0, 5), Error);
  try {
    t.select(0, 5);
    FAIL("no throw");
  } catch (const IndexError& e) {
    std::string what = e.what();
    CHECK(what.find("select: index 5 is out of range for dim 0 of size 2") != std::string::npos);
    CHECK(what.find("[tensor.cpp:") != std::string::npos);
  }
}

TEST_CASE("IOError for missing and corrupt safetensors files") {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_error_kinds_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string missing = (dir / "missing.safetensors").string();
  CHECK_THROWS_AS(load_safetensors(missing), IOError);
  const std::string garbage = (dir / "garbage.safetensors").string();
  std::ofstream(garbage) << "not a safetensors file";
  CHECK_THROWS_AS(load_safetensors(garbage), IOError);
  CHECK_THROWS_AS(load_safetensors(garbage), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("KILN_CHECK_AS throws the kind asked for; KILN_CHECK stays a plain kiln::Error") {
  auto check_value = [](int v) { KILN_CHECK_VALUE(v > 0, "v must be positive, got ", v); };
  auto check_dist = [] { KILN_CHECK_DIST(false, "rank ", 1, " timed out"); };
  auto check_plain = [] { KILN_CHECK(false, "plain"); };
  CHECK_THROWS_AS(check_value(-1), ValueError);
  CHECK_THROWS_WITH_AS(check_dist(), doctest::Contains("rank 1 timed out [test_error_kinds.cpp:"), DistributedError);
  bool plain_is_subclass = true;
  try {
    check_plain();
  } catch (const Error& e) {
    plain_is_subclass = dynamic_cast<const ValueError*>(&e) || dynamic_cast<const IndexError*>(&e) ||
                        dynamic_cast<const IOError*>(&e) || dynamic_cast<const DistributedError*>(&e);
  }
  CHECK_FALSE(plain_is_subclass);
  check_value(1);
}

TEST_CASE("KILN_FAIL throws like a failed KILN_CHECK; KILN_UNREACHABLE names the place as a bug in Kiln") {
  auto fail_plain = [](int key) { KILN_FAIL("no entry for key ", key); };
  auto fail_io = [] { KILN_FAIL_IO("shard ", "a.bin", ": truncated"); };
  auto unreachable = [](int code) -> int { KILN_UNREACHABLE("unknown code ", code); };
  CHECK_THROWS_WITH_AS(fail_plain(7), doctest::Contains("no entry for key 7 [test_error_kinds.cpp:"), Error);
  CHECK_THROWS_WITH_AS(fail_io(), doctest::Contains("shard a.bin: truncated [test_error_kinds.cpp:"), IOError);
  try {
    unreachable(3);
    FAIL("no throw");
  } catch (const IOError&) {
    FAIL("KILN_UNREACHABLE threw a subclass");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("unreachable code at test_error_kinds.cpp:") != std::string::npos);
    CHECK(what.find(": unknown code 3 (this is a bug in Kiln") != std::string::npos);
  }
}

// Note [Error classes] (core/error.h): what a newcomer's catch (ValueError&) / catch (IndexError&)
// must catch through the public API.
template <class E, class F>
bool throws_as(F&& f) {
  try {
    f();
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

TEST_CASE("shape and dtype mistakes are ValueError") {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  CHECK(throws_as<ValueError>([&] { matmul(a, b); }));                                 // inner dims 3 vs 4
  CHECK(throws_as<ValueError>([&] { matmul(a, zeros({3, 2}, DType::f64)); }));         // f32 @ f64
  CHECK(throws_as<ValueError>([&] { matmul(zeros({2, 3}, DType::i64), zeros({3, 2}, DType::i64)); }));  // integers
  CHECK(throws_as<ValueError>([&] { a + zeros({4}); }));                               // no broadcast
  CHECK(throws_as<ValueError>([&] { a.view({4, 2}); }));                               // 6 elements, not 8
  CHECK(throws_as<ValueError>([&] { abs(zeros({2}, DType::b8)); }));                   // no bool kernel
  CHECK(throws_as<ValueError>([&] { cross_entropy(zeros({2, 3}), zeros({2}, DType::f32)); }));  // float targets
  CHECK(throws_as<ValueError>([&] { nn::Linear(nn::LinearOptions(3, 2)).forward(zeros({2, 4})); }));
  CHECK(throws_as<ValueError>([&] { Tensor().numel(); }));                              // undefined
  try {
    matmul(a, b);
  } catch (const ValueError& e) {
    CHECK(std::string(e.what()).find("inner dimensions do not match") != std::string::npos);
  }
}

TEST_CASE("indices and targets out of range are IndexError") {
  Tensor logits = zeros({2, 3});
  CHECK(throws_as<IndexError>([&] { cross_entropy(logits, from_vector<int64_t>({0, 3}, {2})); }));
  CHECK(throws_as<IndexError>([&] { cross_entropy(logits, from_vector<int64_t>({-2, 0}, {2})); }));
  Tensor weight = zeros({4, 2});
  CHECK(throws_as<IndexError>([&] { embedding(weight, from_vector<int64_t>({1, 4}, {2})); }));
  CHECK(throws_as<IndexError>([&] { index_select(weight, 0, from_vector<int64_t>({7}, {1})); }));
  CHECK(throws_as<IndexError>([&] { gather(weight, 1, from_vector<int64_t>({0, 2, 1, 0, 0, 1, 1, 1}, {4, 2})); }));
  CHECK(throws_as<IndexError>([&] { sum(weight, {2}); }));  // dim out of range
  try {
    cross_entropy(logits, from_vector<int64_t>({0, 3}, {2}));
  } catch (const IndexError& e) {
    CHECK(std::string(e.what()).find("target 3 at row 1 is out of range for 3 classes") != std::string::npos);
  }
}
