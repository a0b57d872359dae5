// save_weights/load_weights: state_dict <-> safetensors file.
#include <kiln/nn/serialize.h>

#include <kiln/core/io/safetensors.h>

namespace kiln::nn {

void save_weights(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

void load_weights(Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = load_safetensors(path);
  try {
    module.load_state_dict(file.tensors, strict);
  } catch (const Error& e) {
    throw Error(detail::str_cat("load_weights(\"", path, "\"): ", e.what()));
  }
}

}  // namespace kiln::nn
