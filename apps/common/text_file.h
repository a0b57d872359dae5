// write_text_file: the apps' small whole-file outputs (SVG plots) written all or nothing, with the
// system's reason on failure: a full disk must not leave a 0-byte plot behind a run that exits 0.
#pragma once

#include <string>

namespace kiln::apps {

// Writes `contents` to `path`. A regular file (or a new one) is written as path + ".tmp", flushed
// to disk and renamed over `path`, so a failed write leaves the old file (or none), never a cut
// one; anything else that exists (/dev/stdout, a pipe, /dev/full) is written in place. A failure
// throws kiln::IOError "writing <what> <path> failed: <strerror>" and removes the .tmp file.
void write_text_file(const std::string& path, const std::string& contents, const std::string& what);

}  // namespace kiln::apps
