// Which checkpoint a (re)starting job resumes from, decided by all ranks together: each rank
// proposes the checkpoints it sees in its checkpoint directory (step and content checksum), and
// the job takes the newest one that every rank has with the same content. A checkpoint present
// on only some hosts (node-local disks, a copy still in flight) or different between them is
// never used silently: it is named in `skipped`, and an older common one is used instead, or none.
// See Note [Agreeing on a checkpoint] in parallel/checkpoint_agreement.cpp, in the source tree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/parallel/process_group.h>

namespace kiln::dist {

/// The checkpoint every rank agreed to resume from (agree_on_checkpoint).
struct AgreedCheckpoint {
  std::string path;                  ///< this rank's file of the agreed checkpoint; empty: none is common
  int64_t step = -1;                 ///< its global step, -1 when none
  std::vector<std::string> skipped;  ///< newer checkpoints not used and why, the same on every rank
};

/// Newest checkpoints each rank proposes (older ones are not considered).
inline constexpr int kMaxCheckpointProposals = 16;

/// Collective over `group` (every rank calls it; null means this process alone). Reads the files'
/// headers: "step_<N>.safetensors" names in `dir` whose metadata carries global_step and checksum
/// (optim/checkpoint.h); then reads the picked one whole and checks its data against the checksum on
/// every rank. A file whose header cannot be read, whose size differs from what its header describes,
/// or whose data fails the check is renamed aside as "<name>.corrupt" (not deleted), named in
/// `skipped`, and the next older common checkpoint is tried: a requeued job resumes from the newest
/// good one.
AgreedCheckpoint agree_on_checkpoint(ProcessGroup* group, const std::string& dir);

/// One line for the log: "resuming from <path> (step N)" or "no checkpoint common to all ranks:
/// starting from step 0", followed by the skipped ones.
std::string describe(const AgreedCheckpoint& agreed, const std::string& dir);

}  // namespace kiln::dist
