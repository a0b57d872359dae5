// The --dtype flag of every app, parsed in one place: each dtype has Kiln's name and torch's
// (f32/fp32, bf16, f16/fp16), so `train_gpt --dtype f32` and `bench_gpt --dtype fp32` both work,
// and a value the app does not take fails with the list of those it does.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include <kiln/core/dtype.h>

namespace kiln::apps {

// `s` as one of `allowed` (either spelling); throws kiln::Error listing the choices otherwise.
DType parse_dtype_flag(const std::string& s, const std::vector<DType>& allowed);

// A CLI11 transform for a string --dtype option: accepts either spelling of `allowed` and stores
// Kiln's name (dtype_name: "f32", "bf16", "f16"), so the app compares one spelling and passes that
// on to its Python side; anything else is a command-line error listing the choices.
CLI::Validator dtype_flag(std::vector<DType> allowed);

// "f32 (fp32), bf16": the choices as the help and the errors list them.
std::string dtype_flag_choices(const std::vector<DType>& allowed);

}  // namespace kiln::apps
