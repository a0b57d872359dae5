// KILN_FAULT_INJECT parsing (fault_injection.h).
#include <kiln/parallel/fault_injection.h>

#include <charconv>
#include <cstdlib>
#include <sstream>
#include <vector>

#include <kiln/core/error.h>

namespace kiln::dist {
namespace {

constexpr const char* kForm = "expected KIND:rank=R:seq=N[:ms=M] with KIND stall or exit, e.g. \"stall:rank=1:seq=5\"";

uint64_t parse_count(const std::string& text, const std::string& field, const std::string& whole) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  KILN_CHECK_VALUE(!text.empty() && ec == std::errc() && ptr == text.data() + text.size(), "KILN_FAULT_INJECT=\"",
                   whole, "\": ", field, "=\"", text, "\" is not a non-negative integer; ", kForm);
  return v;
}

}  // namespace

std::string FaultInjection::str() const {
  std::string s = detail::str_cat(kind == Kind::stall ? "stall" : "exit", ":rank=", rank, ":seq=", seq);
  if (duration.count() > 0) s += detail::str_cat(":ms=", duration.count());
  return s;
}

FaultInjection parse_fault_injection(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  KILN_CHECK_VALUE(!parts.empty(), "KILN_FAULT_INJECT is empty; ", kForm);
  FaultInjection f;
  if (parts[0] == "stall")
    f.kind = FaultInjection::Kind::stall;
  else if (parts[0] == "exit")
    f.kind = FaultInjection::Kind::exit;
  else
    KILN_FAIL_VALUE("KILN_FAULT_INJECT=\"", text, "\": unknown kind \"", parts[0], "\"; ", kForm);
  bool has_rank = false, has_seq = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    KILN_CHECK_VALUE(eq != std::string::npos, "KILN_FAULT_INJECT=\"", text, "\": \"", parts[i], "\" is not key=value; ",
                     kForm);
    const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
    if (key == "rank") {
      f.rank = static_cast<int>(parse_count(value, key, text));
      has_rank = true;
    } else if (key == "seq") {
      f.seq = parse_count(value, key, text);
      has_seq = true;
    } else if (key == "ms" && f.kind == FaultInjection::Kind::stall) {
      f.duration = Millis(parse_count(value, key, text));
    } else {
      KILN_FAIL_VALUE("KILN_FAULT_INJECT=\"", text, "\": unknown field \"", key, "\"; ", kForm);
    }
  }
  KILN_CHECK_VALUE(has_rank && has_seq, "KILN_FAULT_INJECT=\"", text, "\" lacks ", has_rank ? "seq" : "rank", "; ",
                   kForm);
  return f;
}

std::optional<FaultInjection> fault_injection_from_env() {
  const char* v = std::getenv("KILN_FAULT_INJECT");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return parse_fault_injection(v);
}

}  // namespace kiln::dist
