// run_main: the main() every app shares, the one place where a failure becomes a line on stderr
// and an exit status (STYLE.md: library code throws; apps catch at main, print one clear line).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace kiln::apps {

struct AppMainOptions {
  std::string name_;                    // the program's name, starting every error line
  bool newline_before_error_ = false;   // end a partly written stdout line first (sample_gpt streams text)
  explicit AppMainOptions(std::string name) : name_(std::move(name)) {}
  AppMainOptions& newline_before_error(bool v) { newline_before_error_ = v; return *this; }
};

// Parses argv into `app`, then runs `body` and returns its status:
//   --help               the help on stdout, exit 0;
//   a bad command line   "<name>: <what> (see <name> --help)" on stderr, exit 2;
//   body throws          stdout flushed, then "<name>: <what>" on stderr, exit 1.
int run_main(CLI::App& app, int argc, char** argv, const AppMainOptions& options, const std::function<int()>& body);

}  // namespace kiln::apps
