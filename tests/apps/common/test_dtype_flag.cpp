// The shared --dtype flag: both spellings of each dtype, Kiln's name stored, and a value the app
// does not take refused with the list of those it does (as a kiln::Error and as a CLI11 error).
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include <kiln/core/error.h>

#include "common/dtype_flag.h"

using kiln::DType;
using kiln::apps::dtype_flag;
using kiln::apps::parse_dtype_flag;

namespace {

const std::vector<DType> kAll = {DType::f32, DType::bf16, DType::f16};

// Parses `--dtype value` into a string option with the transform; returns the stored value.
std::string parse_cli(const std::string& value, const std::vector<DType>& allowed) {
  CLI::App app;
  std::string dtype = "f32";
  app.add_option("--dtype", dtype)->transform(dtype_flag(allowed));
  app.parse("--dtype " + value, /*program_name_included=*/false);
  return dtype;
}

}  // namespace

TEST_CASE("both spellings parse to the same dtype") {
  CHECK(parse_dtype_flag("f32", kAll) == DType::f32);
  CHECK(parse_dtype_flag("fp32", kAll) == DType::f32);
  CHECK(parse_dtype_flag("bf16", kAll) == DType::bf16);
  CHECK(parse_dtype_flag("f16", kAll) == DType::f16);
  CHECK(parse_dtype_flag("fp16", kAll) == DType::f16);
}

TEST_CASE("a dtype the app does not take fails listing the choices") {
  const std::vector<DType> two = {DType::f32, DType::bf16};
  CHECK_THROWS_WITH_AS(parse_dtype_flag("fp16", two), doctest::Contains("f32 (fp32), bf16"), kiln::Error);
  CHECK_THROWS_WITH_AS(parse_dtype_flag("float", kAll), doctest::Contains("f32 (fp32), bf16, f16 (fp16)"),
                       kiln::Error);
  CHECK_THROWS_AS(parse_dtype_flag("F32", kAll), kiln::Error);  // spellings are exact
}

TEST_CASE("the CLI11 transform stores Kiln's name and refuses the rest") {
  CHECK(parse_cli("fp32", kAll) == "f32");
  CHECK(parse_cli("fp16", kAll) == "f16");
  CHECK(parse_cli("bf16", kAll) == "bf16");
  CHECK(parse_cli("f32", kAll) == "f32");
  CHECK_THROWS_WITH_AS(parse_cli("fp16", {DType::f32, DType::bf16}), doctest::Contains("not one of f32 (fp32), bf16"),
                       CLI::ValidationError);
  CHECK_THROWS_AS(parse_cli("f64", kAll), CLI::ValidationError);
}
