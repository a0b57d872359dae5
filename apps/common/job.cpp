// join_job (see job.h).
#include "job.h"

#include <cstdio>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/error.h>
#include <kiln/parallel/checkpoint_agreement.h>
#include <kiln/parallel/init.h>

namespace kiln::apps {

Job join_job(const JobOptions& o) {
  KILN_CHECK(o.device_ == "cpu" || o.device_ == "cuda", "--device must be cpu or cuda, got ", o.device_);
  KILN_CHECK(o.device_ == "cpu" || cuda::is_available(), "--device cuda: no usable CUDA device (",
             cuda::build_info(), "); use --device cpu");
  Job job;
  if (dist::launched()) {
    // CPU ranks talk over Gloo, GPU ranks over NCCL (init_process_group picks cuda:LOCAL_RANK).
    const std::string backend = o.backend_ != "auto" ? o.backend_ : (o.device_ == "cuda" ? "nccl" : "gloo");
    job.group = dist::init_process_group(dist::InitOptions().backend(backend));
    job.rank = job.group->rank();
    job.world = job.group->size();
  }
  if (o.device_ == "cuda") {
    job.device = job.group ? job.group->device() : Device::cuda(0);
    KILN_CHECK(job.device.is_cuda(), "--device cuda: the ", job.group->backend(), " process group runs on ",
               job.device.str(), "; use the nccl backend");
    KILN_CHECK(job.device.index < cuda::device_count(), "--device cuda: rank ", job.rank, " needs ",
               job.device.str(), " but there are ", cuda::device_count(), " device(s)");
    cuda::set_device(job.device.index);
  }
  return job;
}

std::string agreed_checkpoint(const Job& job, const std::string& dir) {
  const dist::AgreedCheckpoint agreed = dist::agree_on_checkpoint(job.group.get(), dir);
  if (job.main())
    for (const std::string& why : agreed.skipped) std::printf("checkpoint not used: %s\n", why.c_str());
  return agreed.path;
}

}  // namespace kiln::apps
