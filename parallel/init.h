// init_process_group: the one call a training program makes to join its job (torch's
// init_process_group with init_method env://). It reads the launcher's variables, rendezvouses
// through a TCP store served by rank 0, and returns the process group.
#pragma once

#include <memory>
#include <string>

#include <kiln/core/arg.h>
#include <kiln/parallel/process_group.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

/// Options of init_process_group: backend, timeout, and explicit rank, world size and address
/// (otherwise read from the launcher's environment).
struct InitOptions {
  std::string backend_ = "auto";  ///< "auto" (nccl with a usable CUDA device, else gloo), "gloo", "nccl"
  /// Rendezvous and every collective's deadline (the watchdog's, Note [Watchdog] in parallel/watchdog.cpp, in the source tree, in
  /// the source tree); 0: the environment's KILN_DIST_TIMEOUT (seconds), else 5 minutes.
  KILN_ARG(Millis, timeout) = Millis(0);
  KILN_ARG(int, rank) = -1;                     ///< -1: from the environment
  KILN_ARG(int, world_size) = -1;               ///< -1: from the environment
  std::string master_addr_;           ///< empty: MASTER_ADDR
  KILN_ARG(int, master_port) = -1;              ///< -1: MASTER_PORT
  InitOptions& backend(std::string b) { backend_ = std::move(b); return *this; }
  InitOptions& master_addr(std::string a) { master_addr_ = std::move(a); return *this; }
};

/// Where this process sits in the job, as read_env_info() found it.
struct EnvInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string launcher;  ///< "torchrun" (RANK, also kiln-run), "slurm" or "mpi"; "options" when all given
  Millis timeout = kDefaultTimeout;  ///< options.timeout, else KILN_DIST_TIMEOUT, else 5 minutes
  bool nccl_blocking_wait = false;   ///< KILN_NCCL_BLOCKING_WAIT=1: NCCL waits block the host
};

/// Where this process sits in the job. The rank variables come from the first launcher found:
///   kiln-run / torchrun:  RANK, WORLD_SIZE, LOCAL_RANK (LOCAL_RANK defaults to RANK when absent)
///   SLURM srun:           SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
///   Open MPI mpirun:      OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
/// and MASTER_ADDR / MASTER_PORT always, KILN_DIST_TIMEOUT (seconds, e.g. "30" or "2.5") and
/// KILN_NCCL_BLOCKING_WAIT ("1": like TORCH_NCCL_BLOCKING_WAIT) when set. Fields set in `options`
/// win over the environment.
/// A missing or malformed variable is a kiln::Error naming it and how to launch.
EnvInfo read_env(const InitOptions& options = {});

/// Whether a launcher started this process as one rank of a job, i.e. whether it should call
/// init_process_group: true when one of the rank variables above is set (RANK, SLURM_PROCID or
/// OMPI_COMM_WORLD_RANK, the first found as in read_env), except for a one-task job (its world
/// size variable is "1") without MASTER_ADDR, e.g. an sbatch script running the program directly,
/// which trains alone. Every app decides with this; read_env then names any variable missing.
bool launched();

/// Reads the environment, makes the TCP store (rank 0 serves at master_addr:master_port) and the
/// backend's process group. Gloo ranks advertise 127.0.0.1 when the master address is loopback,
/// else this machine's hostname.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});

}  // namespace kiln::dist
