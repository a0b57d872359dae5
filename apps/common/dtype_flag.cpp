// The shared --dtype flag (dtype_flag.h).
#include "dtype_flag.h"

#include <algorithm>

#include <kiln/core/error.h>

namespace kiln::apps {
namespace {

// torch's spelling where it differs from Kiln's ("" where it does not).
const char* torch_spelling(DType d) {
  switch (d) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::f64: return "fp64";
    default: return "";
  }
}

bool names(DType d, const std::string& s) {
  return s == dtype_name(d) || (*torch_spelling(d) && s == torch_spelling(d));
}

// Sets `found` to the dtype of `allowed` that `s` names; false when none does.
bool find_dtype(const std::string& s, const std::vector<DType>& allowed, DType& found) {
  auto it = std::find_if(allowed.begin(), allowed.end(), [&](DType d) { return names(d, s); });
  if (it == allowed.end()) return false;
  found = *it;
  return true;
}

}  // namespace

std::string dtype_flag_choices(const std::vector<DType>& allowed) {
  std::string out;
  for (DType d : allowed) {
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
    if (*torch_spelling(d)) out += std::string(" (") + torch_spelling(d) + ")";
  }
  return out;
}

DType parse_dtype_flag(const std::string& s, const std::vector<DType>& allowed) {
  DType d = DType::f32;
  KILN_CHECK_VALUE(find_dtype(s, allowed, d), "--dtype ", s, " is not one of ", dtype_flag_choices(allowed));
  return d;
}

CLI::Validator dtype_flag(std::vector<DType> allowed) {
  const std::string choices = dtype_flag_choices(allowed);
  return CLI::Validator(
      [allowed, choices](std::string& s) -> std::string {
        DType d = DType::f32;
        if (!find_dtype(s, allowed, d)) return "'" + s + "' is not one of " + choices;
        s = dtype_name(d);
        return "";
      },
      "{" + choices + "}", "DTYPE");
}

}  // namespace kiln::apps
