// spawn_ranks: fork, rendezvous through a FileStore, run, barrier, _exit; the parent reaps every
// rank and kills the ones still running at the guard.
#include <kiln/parallel/spawn.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include <kiln/core/error.h>
#include <kiln/parallel/file_store.h>
#include <kiln/parallel/gloo_process_group.h>

namespace kiln::dist {

namespace {

// A fresh directory under the system's temporary directory ($TMPDIR, else /tmp).
std::string make_temp_dir() {
  std::string path = (std::filesystem::temp_directory_path() / "kiln_ranks_XXXXXX").string();
  KILN_CHECK(::mkdtemp(path.data()) != nullptr, "spawn_ranks: cannot create a temporary directory from ", path);
  return path;
}

// The body of rank `rank`; never returns.
[[noreturn]] void run_rank(const std::string& dir, int rank, int world_size,
                           const std::function<void(ProcessGroup&)>& fn, const SpawnOptions& options) {
  int code = 0;
  try {
    auto store = make_file_store(dir, world_size);
    store->set_timeout(options.timeout_);
    auto pg = make_gloo_process_group(store, rank, world_size, GlooOptions().timeout(options.timeout_));
    fn(*pg);
    pg->barrier()->wait();  // nobody tears down connections a peer still reads from
    pg.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d of %d failed: %s\n", rank, world_size, e.what());
    code = 1;
  } catch (...) {
    std::fprintf(stderr, "rank %d of %d failed with a non-standard exception\n", rank, world_size);
    code = 1;
  }
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

bool RankExit::ok() const { return !hung && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string RankExit::describe() const {
  if (hung) return "hung: killed at the guard";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  return "died of signal " + std::to_string(WTERMSIG(status));
}

std::vector<RankExit> spawn_ranks(int world_size, const std::function<void(ProcessGroup&)>& fn,
                                  const SpawnOptions& options) {
  KILN_CHECK(world_size > 0, "spawn_ranks: world size ", world_size, " is not positive");
  const std::string dir = make_temp_dir();
  std::fflush(nullptr);  // buffered output would be written once more by every child
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) run_rank(dir, rank, world_size, fn, options);
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      KILN_FAIL("spawn_ranks: fork failed for rank ", rank);
    }
    pids.push_back(pid);
  }
  const bool guarded = options.guard_.count() > 0;
  const auto deadline = std::chrono::steady_clock::now() + options.guard_;
  std::vector<RankExit> exits(static_cast<size_t>(world_size));
  std::vector<bool> done(static_cast<size_t>(world_size), false);
  int running = world_size;
  while (running > 0) {
    for (int r = 0; r < world_size; ++r) {
      if (done[r]) continue;
      if (::waitpid(pids[r], &exits[r].status, guarded ? WNOHANG : 0) == pids[r]) {
        done[r] = true;
        --running;
      }
    }
    if (running > 0 && guarded && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (done[r]) continue;
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], nullptr, 0);
        exits[r].hung = true;
      }
      break;
    }
    if (running > 0 && guarded) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return exits;
}

}  // namespace kiln::dist
