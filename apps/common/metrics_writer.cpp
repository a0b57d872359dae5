// MetricsWriter (see metrics_writer.h, Note [Resume-safe metrics]).
#include "metrics_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <kiln/core/error.h>

namespace kiln::apps {
namespace {

// The byte length of the prefix of `path` a run resumed after `resume_step` keeps, and its lines.
uintmax_t kept_prefix(const std::string& path, int64_t resume_step, std::vector<nlohmann::json>& kept) {
  std::ifstream in(path, std::ios::binary);
  uintmax_t keep = 0;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    const bool complete = !in.eof();  // getline stopped at a newline, not at the end of the file
    if (!complete && line.empty()) break;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!complete && !j.is_object()) break;  // cut off mid-write: dropped
    KILN_CHECK(j.is_object(), "metrics file ", path, " line ", n, " is not a JSON object: '", line.substr(0, 80), "'");
    if (j.contains("step") && j["step"].is_number() && j["step"].get<double>() > double(resume_step)) break;
    keep += line.size() + (complete ? 1 : 0);
    kept.push_back(std::move(j));
    if (!complete) break;
  }
  return keep;
}

std::string reason(int err) { return err != 0 ? std::strerror(err) : "unknown reason (no errno)"; }

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step) : path_(path) {
  if (path_.empty()) return;
  std::ios::openmode mode = std::ios::trunc;
  if (resume_step > 0 && std::filesystem::exists(path_)) {
    const uintmax_t keep = kept_prefix(path_, resume_step, kept_);
    std::error_code ec;
    std::filesystem::resize_file(path_, keep, ec);
    KILN_CHECK(!ec, "cannot truncate the metrics file ", path_, " to ", keep, " bytes: ", ec.message());
    mode = std::ios::app;
  }
  errno = 0;
  out_.open(path_, std::ios::out | mode);
  KILN_CHECK_IO(out_.is_open(), "cannot open the metrics file ", path_, ": ", reason(errno));
  // A kept last line without its newline (the file ended there) gets one before new lines.
  if (!kept_.empty() && std::filesystem::file_size(path_) > 0) {
    std::ifstream tail(path_, std::ios::binary);
    tail.seekg(-1, std::ios::end);
    if (tail.get() != '\n') out_ << '\n';
  }
}

void MetricsWriter::write(const nlohmann::json& object) {
  if (!out_.is_open()) return;
  errno = 0;  // the stream keeps no reason; the failed write(2) under it leaves one in errno
  out_ << object.dump() << '\n';
  out_.flush();
  KILN_CHECK_IO(out_.good(), "writing the metrics file ", path_, " failed: ", reason(errno));
}

}  // namespace kiln::apps
