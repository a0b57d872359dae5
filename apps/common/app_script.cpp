// Finding an app's Python side (app_script.h).
#include "app_script.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <kiln/core/error.h>

namespace kiln::apps {

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::string find_app_script(const std::string& name, const std::string& override_path, const std::string& source_path,
                            const std::string& exe_dir) {
  std::error_code ec;
  if (!override_path.empty()) {
    KILN_CHECK_IO(std::filesystem::is_regular_file(override_path, ec), "--torch-script ", override_path,
                  ": no such file");
    return override_path;
  }
  std::vector<std::string> tried;
  if (!exe_dir.empty()) tried.push_back((std::filesystem::path(exe_dir) / name).string());
  if (!source_path.empty()) tried.push_back(source_path);
  const auto found = std::find_if(tried.begin(), tried.end(),
                                  [&](const std::string& p) { return std::filesystem::is_regular_file(p, ec); });
  std::string list;
  for (const std::string& p : tried) list += (list.empty() ? "" : ", ") + p;
  KILN_CHECK_IO(found != tried.end(), "the PyTorch side ", name, " is in none of: ",
                list.empty() ? "(no path known)" : list, " (pass --torch-script PATH, or --no-torch for Kiln alone)");
  return *found;
}

}  // namespace kiln::apps
