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
