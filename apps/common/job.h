// join_job: where a training app runs, decided the same way in every app: alone, or as one rank of
// the job a launcher started (dist::launched(): kiln-run, torchrun, srun, mpirun), on the CPU or
// on the GPU of its local rank.
#pragma once

#include <memory>
#include <string>

#include <kiln/core/device.h>
#include <kiln/parallel/process_group.h>

namespace kiln::apps {

struct JobOptions {
  std::string device_ = "cpu";     // "cpu" or "cuda"
  std::string backend_ = "auto";   // under a launcher: "auto" (nccl for cuda, gloo for cpu), "gloo", "nccl"
  JobOptions& device(std::string v) { device_ = std::move(v); return *this; }
  JobOptions& backend(std::string v) { backend_ = std::move(v); return *this; }
};

struct Job {
  std::shared_ptr<dist::ProcessGroup> group;  // null when the process trains alone
  Device device = Device::cpu();              // cuda: the group's device (cuda:LOCAL_RANK), else cuda:0
  int rank = 0;
  int world = 1;
  bool main() const { return rank == 0; }
};

// Checks that --device cuda has a usable device, joins the process group when dist::launched()
// (collective: every rank calls it), and makes the CUDA device current.
Job join_job(const JobOptions& options);

// --resume: the newest checkpoint in `dir` that every rank of the job holds with the same content
// (dist::agree_on_checkpoint, Note [Agreeing on a checkpoint]; collective), "" when none is
// common. The main rank prints each newer one it skipped and why.
std::string agreed_checkpoint(const Job& job, const std::string& dir);

}  // namespace kiln::apps
