// agree_on_checkpoint (parallel/checkpoint_agreement.h) on three forked Gloo ranks, each with its
// own checkpoint directory as on node-local disks: the newest checkpoint every rank has with the
// same content wins; one missing on a rank, or different there, is skipped and named; with none
// in common every rank starts from scratch; alone, the newest readable one is used.
#include "test_util.h"

#include <filesystem>
#include <fstream>

#include <kiln/core/factory.h>
#include <kiln/optim/sgd.h>
#include <kiln/optim/checkpoint.h>
#include <kiln/parallel/checkpoint_agreement.h>

#include "parallel/run_ranks.h"
#include "parallel/temp_dir.h"

using namespace kiln;
using namespace kiln::dist;
namespace fs = std::filesystem;

namespace {

// A real checkpoint whose weights are `value` (the content the checksum covers).
void write_checkpoint(const fs::path& dir, int64_t step, float value) {
  fs::create_directories(dir);
  Tensor w = full({3}, value);
  optim::SGD opt(std::vector<Tensor>{w}, optim::SGDOptions(0.1));
  optim::TrainingProgress p;
  p.global_step = step;
  optim::save_checkpoint((dir / ("step_" + std::to_string(step) + ".safetensors")).string(), {{"w", w}}, opt, p);
}

std::string rank_dir(const std::string& root, int rank) { return root + "/host" + std::to_string(rank); }

}  // namespace

TEST_CASE("the newest checkpoint all ranks share wins; one missing or different on a rank is named") {
  test::TempDir tmp("kiln_agree");
  for (int r = 0; r < 3; ++r) {
    write_checkpoint(rank_dir(tmp.path, r), 4, 1.0f);
    write_checkpoint(rank_dir(tmp.path, r), 8, 2.0f);
  }
  write_checkpoint(rank_dir(tmp.path, 0), 12, 3.0f);  // only on rank 0's host
  write_checkpoint(rank_dir(tmp.path, 1), 12, 3.0f);
  write_checkpoint(rank_dir(tmp.path, 2), 8, 2.5f);   // rank 2's step 8 differs
  test::run_ranks(3, [&](ProcessGroup& pg) {
    const AgreedCheckpoint a = agree_on_checkpoint(&pg, rank_dir(tmp.path, pg.rank()));
    test::expect(a.step == 4, "agreed step " + std::to_string(a.step) + ", expected 4");
    test::expect(a.path == rank_dir(tmp.path, pg.rank()) + "/step_4.safetensors", "path " + a.path);
    test::expect(a.skipped.size() == 2, "skipped " + std::to_string(a.skipped.size()));
    test::expect(a.skipped[0] == "step_12.safetensors: missing on rank(s) 2", a.skipped[0]);
    test::expect(a.skipped[1].find("step_8.safetensors: different content on rank(s)") == 0, a.skipped[1]);
  });
}

TEST_CASE("no checkpoint common to all ranks: every rank starts from scratch and says why") {
  test::TempDir tmp("kiln_agree");
  write_checkpoint(rank_dir(tmp.path, 0), 6, 1.0f);
  write_checkpoint(rank_dir(tmp.path, 1), 6, 1.0f);
  test::run_ranks(3, [&](ProcessGroup& pg) {
    const AgreedCheckpoint a = agree_on_checkpoint(&pg, rank_dir(tmp.path, pg.rank()));
    test::expect(a.step == -1 && a.path.empty(), "a checkpoint was agreed: " + a.path);
    test::expect(a.skipped.size() == 1 && a.skipped[0] == "step_6.safetensors: missing on rank(s) 2",
                 a.skipped.empty() ? std::string("nothing skipped") : a.skipped[0]);
    test::expect(describe(a, "d").find("starting from step 0") != std::string::npos, describe(a, "d"));
  });
}

TEST_CASE("alone: the newest readable checkpoint; a damaged header is skipped and named") {
  test::TempDir tmp("kiln_agree");
  write_checkpoint(tmp.path, 3, 1.0f);
  write_checkpoint(tmp.path, 5, 1.0f);
  std::ofstream(tmp.path + "/step_9.safetensors") << "garbage";
  const AgreedCheckpoint a = agree_on_checkpoint(nullptr, tmp.path);
  CHECK(a.step == 5);
  CHECK(a.path == tmp.path + "/step_5.safetensors");
  REQUIRE(a.skipped.size() == 1);
  CHECK(a.skipped[0].find("step_9.safetensors: unreadable here") == 0);
  CHECK(agree_on_checkpoint(nullptr, tmp.path + "/none").step == -1);
}

namespace {

// Flips one byte `from_end` bytes before the end of the file (in the tensor data).
void flip_byte(const std::string& path, int64_t from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-from_end, std::ios::end);
  c = char(c ^ 0x5a);
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("alone: a newest checkpoint with a flipped data byte or a cut tail is set aside, the previous one used") {
  test::TempDir tmp("kiln_agree");
  write_checkpoint(tmp.path, 6, 1.0f);
  write_checkpoint(tmp.path, 8, 2.0f);
  write_checkpoint(tmp.path, 10, 3.0f);
  flip_byte(tmp.path + "/step_10.safetensors", 2);  // the header still reads; the data does not match
  const std::string step8 = tmp.path + "/step_8.safetensors";
  fs::resize_file(step8, fs::file_size(step8) - 4);  // a cut tail
  std::ofstream(tmp.path + "/step_12.safetensors.tmp") << "partial";  // a write killed half-way
  const AgreedCheckpoint a = agree_on_checkpoint(nullptr, tmp.path);
  CHECK(a.step == 6);
  CHECK(a.path == tmp.path + "/step_6.safetensors");
  REQUIRE(a.skipped.size() == 3);
  CHECK(a.skipped[2] == "step_12.safetensors.tmp: a partial write (7 bytes), removed");
  CHECK_FALSE(fs::exists(tmp.path + "/step_12.safetensors.tmp"));
  CHECK(a.skipped[0].find("step_10.safetensors: its data does not match its checksum on rank(s) 0") == 0);
  CHECK(a.skipped[0].find("checksum mismatch") != std::string::npos);
  CHECK(a.skipped[1].find("step_8.safetensors: unreadable here (truncated: the file has") == 0);
  // Set aside, not deleted: the next start does not see them, and nobody lost the bytes.
  CHECK(fs::exists(tmp.path + "/step_10.safetensors.corrupt"));
  CHECK(fs::exists(step8 + ".corrupt"));
  CHECK_FALSE(fs::exists(tmp.path + "/step_10.safetensors"));
  const AgreedCheckpoint again = agree_on_checkpoint(nullptr, tmp.path);
  CHECK(again.step == 6);
  CHECK(again.skipped.empty());
}

TEST_CASE("a checkpoint corrupt on one rank only is set aside by all: every rank resumes the older one") {
  test::TempDir tmp("kiln_agree");
  for (int r = 0; r < 3; ++r) {
    write_checkpoint(rank_dir(tmp.path, r), 4, 1.0f);
    write_checkpoint(rank_dir(tmp.path, r), 8, 2.0f);
  }
  flip_byte(rank_dir(tmp.path, 1) + "/step_8.safetensors", 3);
  test::run_ranks(3, [&](ProcessGroup& pg) {
    const AgreedCheckpoint a = agree_on_checkpoint(&pg, rank_dir(tmp.path, pg.rank()));
    test::expect(a.step == 4, "agreed step " + std::to_string(a.step) + ", expected 4");
    test::expect(a.skipped.size() == 1 &&
                     a.skipped[0].find("step_8.safetensors: its data does not match its checksum on rank(s) 1;") == 0,
                 a.skipped.empty() ? std::string("nothing skipped") : a.skipped[0]);
  });
  CHECK(fs::exists(rank_dir(tmp.path, 1) + "/step_8.safetensors.corrupt"));
  CHECK(fs::exists(rank_dir(tmp.path, 0) + "/step_8.safetensors"));  // good copies stay where they are
}
