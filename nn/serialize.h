// Module weights on disk as safetensors (core/io/safetensors.h): the state_dict's dotted names
// and order are the file's, so a Kiln checkpoint opens in Hugging Face / PyTorch and back.
#pragma once

#include <map>
#include <string>

#include <kiln/nn/module.h>

namespace kiln::nn {

/// Writes module.state_dict() (atomically, see save_safetensors).
void save_weights(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata = {});
/// Reads the file and load_state_dict()s it; a failure names the path and every problem.
void load_weights(Module& module, const std::string& path, bool strict = true);

}  // namespace kiln::nn
