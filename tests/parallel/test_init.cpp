// read_env and launched(): rank, world size, local rank and master address from torchrun/kiln-run,
// SLURM and Open MPI variables, and whether a launcher started the process; options overriding
// them; errors that name the missing variable; and init_process_group end to end (two forked
// ranks over the TCP store), including backend errors.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "test_util.h"

#include <kiln/parallel/init.h>

using namespace kiln;

namespace {

const char* kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                       "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"};

// Clears every launcher variable for one test case, sets the given ones, restores on exit.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& set) {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(v);
    }
    for (const auto& [k, v] : set) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace

TEST_CASE("torchrun / kiln-run variables") {
  ScopedEnv env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29400"}});
  dist::EnvInfo info = dist::read_env();
  CHECK(info.rank == 3);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 1);
  CHECK(info.master_addr == "node7");
  CHECK(info.master_port == 29400);
  CHECK(info.launcher == "torchrun");
}

TEST_CASE("LOCAL_RANK defaults to RANK") {
  ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}});
  CHECK(dist::read_env().local_rank == 2);
}

TEST_CASE("SLURM variables") {
  ScopedEnv env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}, {"MASTER_ADDR", "head"},
                 {"MASTER_PORT", "29500"}});
  dist::EnvInfo info = dist::read_env();
  CHECK(info.rank == 5);
  CHECK(info.world_size == 6);
  CHECK(info.local_rank == 2);
  CHECK(info.master_addr == "head");
  CHECK(info.launcher == "slurm");
}

TEST_CASE("Open MPI variables") {
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                 {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "40000"}});
  dist::EnvInfo info = dist::read_env();
  CHECK(info.rank == 1);
  CHECK(info.world_size == 2);
  CHECK(info.local_rank == 0);
  CHECK(info.master_port == 40000);
  CHECK(info.launcher == "mpi");
}

TEST_CASE("RANK wins over SLURM when both are set (torchrun inside an allocation)") {
  ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
                 {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  dist::EnvInfo info = dist::read_env();
  CHECK(info.rank == 1);
  CHECK(info.world_size == 2);
}

TEST_CASE("launched: each launcher's variables start a rank, none is a lone process") {
  SUBCASE("no launcher") {
    ScopedEnv env({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
    CHECK_FALSE(dist::launched());
  }
  SUBCASE("kiln-run / torchrun") {
    ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
    CHECK(dist::launched());
  }
  SUBCASE("torchrun with one worker") {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
    CHECK(dist::launched());
  }
  SUBCASE("SLURM srun") {  // train_cifar used to look at WORLD_SIZE only and trained each task alone
    ScopedEnv env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}});
    CHECK(dist::launched());
  }
  SUBCASE("Open MPI mpirun") {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"MASTER_ADDR", "head"}});
    CHECK(dist::launched());
  }
  SUBCASE("a one-task SLURM step with MASTER_ADDR is a job of one") {
    ScopedEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"MASTER_ADDR", "head"}});
    CHECK(dist::launched());
  }
  SUBCASE("a one-task SLURM or MPI step without MASTER_ADDR trains alone") {
    {
      ScopedEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
      CHECK_FALSE(dist::launched());
    }
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
    CHECK_FALSE(dist::launched());
  }
  SUBCASE("a rank variable without its world size is launched, and read_env names what is missing") {
    ScopedEnv env(std::map<std::string, std::string>{{"SLURM_PROCID", "3"}});
    CHECK(dist::launched());
    CHECK_ERROR_CONTAINS(dist::read_env(), "SLURM_NTASKS is not set");
  }
  SUBCASE("an empty variable counts as unset") {
    ScopedEnv env(std::map<std::string, std::string>{{"RANK", ""}, {"WORLD_SIZE", "2"}});
    CHECK_FALSE(dist::launched());
  }
}

TEST_CASE("options override the environment") {
  ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  dist::EnvInfo info = dist::read_env(dist::InitOptions().master_addr("b").master_port(2).world_size(4).rank(3));
  CHECK(info.rank == 3);
  CHECK(info.world_size == 4);
  CHECK(info.master_addr == "b");
  CHECK(info.master_port == 2);
  ScopedEnv empty({});
  info = dist::read_env(dist::InitOptions().rank(0).world_size(1).master_addr("localhost").master_port(29500));
  CHECK(info.launcher == "options");
  CHECK(info.local_rank == 0);
}

TEST_CASE("missing or malformed variables name the variable") {
  {
    ScopedEnv env({});
    CHECK_ERROR_CONTAINS(dist::read_env(), "RANK is not set", "kiln-run or torchrun");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
    CHECK_ERROR_CONTAINS(dist::read_env(), "WORLD_SIZE is not set", "kiln-run or torchrun");
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "0"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
    CHECK_ERROR_CONTAINS(dist::read_env(), "SLURM_NTASKS is not set");
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}, {"MASTER_PORT", "1"}});
    CHECK_ERROR_CONTAINS(dist::read_env(), "MASTER_ADDR is not set", "kiln-run or torchrun");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "a"}});
    CHECK_ERROR_CONTAINS(dist::read_env(), "MASTER_PORT is not set");
  }
  {
    ScopedEnv env({{"RANK", "zero"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
    CHECK_ERROR_CONTAINS(dist::read_env(), "RANK=\"zero\"", "not an integer");
  }
  {
    ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
    CHECK_ERROR_CONTAINS(dist::read_env(), "rank 4 is not in [0, 4)");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}});
    CHECK_ERROR_CONTAINS(dist::read_env(), "MASTER_PORT 70000");
  }
}

namespace {


}  // namespace

TEST_CASE("init_process_group: two ranks from RANK/WORLD_SIZE/MASTER_* over the TCP store") {
  std::string port = std::to_string(dist::pick_free_port());
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        ScopedEnv env({{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(rank)},
                       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
        auto pg = dist::init_process_group(dist::InitOptions().backend("gloo").timeout(std::chrono::seconds(20)));
        Tensor t = full({10}, rank + 1.0);
        pg->allreduce(t)->wait();
        if (pg->rank() != rank || pg->size() != 2 || pg->backend() != "gloo" || t.to_vector<float>()[9] != 3.0f) {
          std::fprintf(stderr, "rank %d: wrong group or sum %f\n", rank, t.to_vector<float>()[9]);
          code = 1;
        }
        pg->barrier()->wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  for (int rank = 0; rank < 2; ++rank) {
    int st = 0;
    ::waitpid(pids[rank], &st, 0);
    CHECK_MESSAGE((WIFEXITED(st) && WEXITSTATUS(st) == 0), "rank ", rank, " failed");
  }
}

TEST_CASE("init_process_group: backend errors") {
  ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
  if (!cuda::is_available())  // nccl without a device (or without CUDA) says why and what to use
    CHECK_ERROR_CONTAINS(dist::init_process_group(dist::InitOptions().backend("nccl")), "\"nccl\"",
                         cuda::kBuilt ? "needs a usable CUDA device" : "needs Kiln built with CUDA",
                         "pass backend \"gloo\"");
  CHECK_ERROR_CONTAINS(dist::init_process_group(dist::InitOptions().backend("mpi")), "unknown backend \"mpi\"");
}
