// run_main (see app_main.h).
#include "app_main.h"

#include <cstdio>
#include <exception>

namespace kiln::apps {

int run_main(CLI::App& app, int argc, char** argv, const AppMainOptions& options, const std::function<int()>& body) {
  const char* name = options.name_.c_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "%s: %s (see %s --help)\n", name, e.what(), name);
    return 2;
  }
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s%s: %s\n", options.newline_before_error_ ? "\n" : "", name, e.what());
    return 1;
  }
}

}  // namespace kiln::apps
