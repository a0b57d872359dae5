// KILN_DISTRIBUTED_DEBUG / TORCH_DISTRIBUTED_DEBUG: parsing, and the DETAIL wrapper.
#include <kiln/parallel/debug_level.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include <kiln/parallel/checked_process_group.h>

namespace kiln::dist {

DebugLevel debug_level() {
  for (const char* var : {"KILN_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG"}) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    std::string s(v);
    for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    if (s == "OFF") return DebugLevel::off;
    if (s == "INFO") return DebugLevel::info;
    if (s == "DETAIL") return DebugLevel::detail;
    KILN_FAIL(var, "=", v, " is not a debug level; expected OFF, INFO or DETAIL");
  }
  return DebugLevel::off;
}

std::shared_ptr<ProcessGroup> with_debug_checks(std::shared_ptr<ProcessGroup> group, DebugLevel level) {
  if (level != DebugLevel::detail || !group || dynamic_cast<CheckedProcessGroup*>(group.get())) return group;
  return std::make_shared<CheckedProcessGroup>(std::move(group));
}

}  // namespace kiln::dist
