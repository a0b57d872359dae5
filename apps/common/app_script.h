// Where an app finds its Python side (bench_ops.py, bench_gpt.py, ...): next to its own
// executable first (the build copies the scripts and the modules they import into its apps
// folder, so a moved or copied build keeps working), then at the source tree's path the build
// recorded; `--torch-script` overrides both. None there: an error naming every path tried.
#pragma once

#include <string>
#include <vector>

namespace kiln::apps {

// The folder holding this process's executable (/proc/self/exe), or "" when it cannot be read.
std::string executable_dir();

// The script to run: `override_path` when it is given (it must exist), else the first existing
// of <exe_dir>/<name> and `source_path`. Throws kiln::Error naming the paths tried when none
// exists. `exe_dir` defaults to executable_dir().
std::string find_app_script(const std::string& name, const std::string& override_path, const std::string& source_path,
                            const std::string& exe_dir = executable_dir());

}  // namespace kiln::apps
