// MetricsWriter (Note [Resume-safe metrics]): a fresh run empties the file; a run resumed at step
// N keeps exactly the bytes before the first line past N, so no line is there twice or stale; a
// line cut off mid-write is dropped; a damaged line is an error naming the file and line.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "common/metrics_writer.h"
#include "test_util.h"

using kiln::apps::MetricsWriter;
using json = nlohmann::json;

namespace {

struct TempFile {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("kiln_metrics_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".jsonl"))
                         .string();
  ~TempFile() { std::filesystem::remove(path); }
  static inline int counter = 0;
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_raw(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A train_gpt-like run: a config line, then one train line per step in [from, to].
void run_steps(MetricsWriter& w, int from, int to) {
  w.write({{"type", "config"}, {"start_step", from - 1}});
  for (int s = from; s <= to; ++s) w.write({{"type", "train"}, {"step", s}, {"loss", 10.0 - s}});
}

}  // namespace

TEST_CASE("a fresh run writes one compact object per line and empties an old file") {
  TempFile f;
  write_raw(f.path, "{\"step\":1}\n{\"step\":2}\n");
  {
    MetricsWriter w(f.path);
    CHECK(w.enabled());
    CHECK(w.kept().empty());
    w.write({{"step", 1}, {"loss", 2.5}});
  }
  CHECK(read(f.path) == "{\"loss\":2.5,\"step\":1}\n");
}

TEST_CASE("resume truncates to the resumed step: no duplicate or stale lines") {
  TempFile f;
  {
    MetricsWriter w(f.path);
    run_steps(w, 1, 15);  // the checkpoint was at step 10; the run died after logging step 15
  }
  const std::string before = read(f.path);
  {
    MetricsWriter w(f.path, /*resume_step=*/10);
    REQUIRE(w.kept().size() == 11);  // the config line and steps 1..10
    CHECK(w.kept().front()["type"] == "config");
    CHECK(w.kept().back()["step"] == 10);
    // The kept bytes are the file's own, unchanged.
    CHECK(read(f.path) == before.substr(0, read(f.path).size()));
    run_steps(w, 11, 20);
  }
  std::ifstream in(f.path);
  std::vector<int> steps;
  int configs = 0;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.contains("step")) steps.push_back(j["step"].get<int>());
    else ++configs;
  }
  std::vector<int> expected;
  for (int s = 1; s <= 20; ++s) expected.push_back(s);
  CHECK(steps == expected);  // appending (the old behaviour) gives 1..15, 11..20
  CHECK(configs == 2);       // the first run's and the resumed run's
}

TEST_CASE("resume keeps lines of the resumed step itself, e.g. its evaluation") {
  TempFile f;
  write_raw(f.path, "{\"step\":1}\n{\"step\":2}\n{\"step\":2,\"val_loss\":3}\n{\"step\":3}\n");
  MetricsWriter w(f.path, 2);
  CHECK(w.kept().size() == 3);
  CHECK(read(f.path) == "{\"step\":1}\n{\"step\":2}\n{\"step\":2,\"val_loss\":3}\n");
}

TEST_CASE("a later run's lines after an earlier resume point go too (truncation, not filtering)") {
  TempFile f;
  // Steps 1..4, then a run resumed at 2 that logged 3 again: resuming at 3 keeps up to the first 3.
  write_raw(f.path, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4}\n{\"step\":3}\n");
  MetricsWriter w(f.path, 3);
  CHECK(read(f.path) == "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
}

TEST_CASE("a line cut off mid-write is dropped; a whole object without its newline is kept") {
  TempFile f;
  write_raw(f.path, "{\"step\":1}\n{\"step\":2,\"lo");
  {
    MetricsWriter w(f.path, 5);
    CHECK(w.kept().size() == 1);
    w.write({{"step", 2}});
  }
  CHECK(read(f.path) == "{\"step\":1}\n{\"step\":2}\n");
  write_raw(f.path, "{\"step\":1}\n{\"step\":2}");
  {
    MetricsWriter w(f.path, 5);
    CHECK(w.kept().size() == 2);
    w.write({{"step", 3}});
  }
  CHECK(read(f.path) == "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
}

TEST_CASE("resume without a file creates it; an empty path writes nothing") {
  TempFile f;
  {
    MetricsWriter w(f.path, 7);
    CHECK(w.kept().empty());
    w.write({{"step", 8}});
  }
  CHECK(read(f.path) == "{\"step\":8}\n");
  MetricsWriter none("", 3);
  CHECK_FALSE(none.enabled());
  none.write({{"step", 1}});  // no-op
}

TEST_CASE("a damaged line in the middle is an error naming the file and the line") {
  TempFile f;
  write_raw(f.path, "{\"step\":1}\nnot json\n{\"step\":2}\n");
  CHECK_ERROR_CONTAINS(MetricsWriter(f.path, 5), f.path.c_str(), "line 2", "not a JSON object");
  CHECK(read(f.path) == "{\"step\":1}\nnot json\n{\"step\":2}\n");  // left as it was
}

TEST_CASE("a failed write names the file and the system's reason (errno)") {
  // /dev/full accepts the open and fails every write with ENOSPC, as a full disk does.
  MetricsWriter w("/dev/full");
  CHECK_ERROR_CONTAINS(w.write({{"type", "train"}, {"step", 1}}),
                       "writing the metrics file /dev/full failed: No space left on device");
  CHECK_ERROR_CONTAINS(MetricsWriter("/nonexistent-dir/m.jsonl"), "cannot open the metrics file",
                       "No such file or directory");
}
