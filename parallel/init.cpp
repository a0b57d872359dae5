// init_process_group: environment -> TCP store -> backend process group. "auto" means NCCL when
// Kiln was built with CUDA and this process sees a usable device, else Gloo.
#include <kiln/parallel/init.h>

#include <unistd.h>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/error.h>
#include <kiln/parallel/debug_level.h>
#include <kiln/parallel/gloo_process_group.h>
#include <kiln/parallel/job_store.h>
#include <kiln/parallel/nccl_process_group.h>

namespace kiln::dist {
namespace {

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The address this rank's Gloo device binds and advertises to its peers.
std::string gloo_hostname(const std::string& master_addr) {
  if (std::string chosen = advertised_address(); !chosen.empty()) return chosen;  // kiln-run's elastic agent
  if (is_loopback(master_addr)) return "127.0.0.1";
  char name[256] = {};
  KILN_CHECK_DIST(::gethostname(name, sizeof name - 1) == 0, "init_process_group: gethostname failed");
  return name;
}

std::string resolve_backend(const std::string& requested) {
  KILN_CHECK(requested == "auto" || requested == "gloo" || requested == "nccl", "init_process_group: unknown backend \"",
             requested, "\"; expected \"auto\", \"gloo\" or \"nccl\"");
  if (requested != "auto") return requested;
  return cuda::is_available() ? "nccl" : "gloo";
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  EnvInfo env = read_env(options);
  std::string backend = resolve_backend(options.backend_);
  if (backend == "nccl") {
    KILN_CHECK_DIST(cuda::kBuilt, "init_process_group: backend \"nccl\" needs Kiln built with CUDA "
                    "(configure with -DKILN_CUDA=ON); pass backend \"gloo\" for CPU collectives");
    KILN_CHECK_DIST(cuda::is_available(), "init_process_group: backend \"nccl\" needs a usable CUDA device, and ",
                    cuda::build_info(), "; pass backend \"gloo\" for CPU collectives");
  }
  auto store = make_job_store(env, env.timeout);  // rank 0's, or kiln-run's agent's (per generation)
  if constexpr (cuda::kBuilt) {
    if (backend == "nccl") {
      // One device per local rank, as torchrun users set with torch.cuda.set_device(local_rank).
      int device = env.local_rank % cuda::device_count();
      cuda::set_device(device);
      return with_debug_checks(make_nccl_process_group(
          store, env.rank, env.world_size,
          NcclOptions().timeout(env.timeout).device(device).blocking_wait(env.nccl_blocking_wait)));
    }
  }
  // KILN_DISTRIBUTED_DEBUG=DETAIL: every collective checked across ranks (checked_process_group.h).
  return with_debug_checks(make_gloo_process_group(
      store, env.rank, env.world_size, GlooOptions().timeout(env.timeout).hostname(gloo_hostname(env.master_addr))));
}

}  // namespace kiln::dist
