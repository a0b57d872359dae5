// kiln::dist::launch (the engine of kiln-run) on /bin/sh workers: torchrun's variables per rank,
// "[rank N] " line prefixes, stopping the group on the first failure (exit code or signal),
// restarts, exec failures, signal forwarding, and no zombies or leaked fds afterwards.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <kiln/parallel/launcher.h>

#include "test_util.h"

using namespace kiln;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// A scratch directory and the files the launcher's stdout/stderr go to.
struct Scratch {
  fs::path dir;
  int out_fd = -1, err_fd = -1;

  Scratch() {
    static int counter = 0;
    dir = fs::temp_directory_path() / ("kiln_launcher_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
    out_fd = ::open((dir / "out.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err_fd = ::open((dir / "err.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(out_fd >= 0);
    REQUIRE(err_fd >= 0);
  }
  ~Scratch() {
    ::close(out_fd);
    ::close(err_fd);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  // Options running `/bin/sh -c script` with $0 set to the scratch directory.
  dist::LaunchOptions sh(const std::string& script, int nproc) const {
    return dist::LaunchOptions({"/bin/sh", "-c", script, dir.string()})
        .nproc_per_node(nproc)
        .stdout_fd(out_fd)
        .stderr_fd(err_fd);
  }
  std::string out() const { return read_text(dir / "out.txt"); }
  std::string err() const { return read_text(dir / "err.txt"); }
};

std::map<std::string, std::string> read_env(const fs::path& p) {
  std::map<std::string, std::string> env;
  for (const std::string& l : lines_of(read_text(p))) {
    size_t eq = l.find('=');
    if (eq != std::string::npos) env[l.substr(0, eq)] = l.substr(eq + 1);
  }
  return env;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int open_fd_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

TEST_CASE("every worker gets torchrun's variables for its rank") {
  Scratch s;
  ::setenv("KILN_LAUNCHER_TEST_INHERITED", "kept", 1);
  ::setenv("RANK", "99", 1);  // the launcher's own value must not leak into the workers
  auto o = s.sh("env > \"$0/env.$LOCAL_RANK\"", 3).nnodes(2).node_rank(1).master_addr("10.1.2.3").master_port(12345);
  CHECK(dist::launch(o) == 0);
  ::unsetenv("RANK");
  for (int local = 0; local < 3; ++local) {
    auto env = read_env(s.dir / ("env." + std::to_string(local)));
    CAPTURE(local);
    CHECK(env["RANK"] == std::to_string(3 + local));
    CHECK(env["LOCAL_RANK"] == std::to_string(local));
    CHECK(env["WORLD_SIZE"] == "6");
    CHECK(env["LOCAL_WORLD_SIZE"] == "3");
    CHECK(env["GROUP_RANK"] == "1");
    CHECK(env["GROUP_WORLD_SIZE"] == "2");
    CHECK(env["MASTER_ADDR"] == "10.1.2.3");
    CHECK(env["MASTER_PORT"] == "12345");
    CHECK(env["KILN_RESTART_COUNT"] == "0");
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(env["KILN_LAUNCHER_TEST_INHERITED"] == "kept");
  }
  ::unsetenv("KILN_LAUNCHER_TEST_INHERITED");
}

TEST_CASE("standalone: MASTER_ADDR 127.0.0.1 and one free port shared by all ranks") {
  Scratch s;
  CHECK(dist::launch(s.sh("env > \"$0/env.$RANK\"", 2).master_addr("10.9.9.9").standalone(true)) == 0);
  auto e0 = read_env(s.dir / "env.0"), e1 = read_env(s.dir / "env.1");
  CHECK(e0["MASTER_ADDR"] == "127.0.0.1");
  CHECK(e0["MASTER_PORT"] == e1["MASTER_PORT"]);
  int port = std::stoi(e0["MASTER_PORT"]);
  CHECK(port > 0);
  CHECK(port < 65536);
  int free = dist::pick_free_port();
  CHECK(free > 0);
  CHECK(free < 65536);
}

TEST_CASE("output lines carry the rank prefix and are never split") {
  Scratch s;
  // 300 lines per rank on stdout, written in pieces; an unterminated tail; one stderr line.
  std::string script =
      "i=0; while [ $i -lt 300 ]; do printf 'r%s-line-%s ' $RANK $i; printf 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n';"
      " i=$((i+1)); done; echo \"oops $RANK\" >&2; printf 'tail-%s' $RANK";
  REQUIRE(dist::launch(s.sh(script, 3)) == 0);
  std::map<int, int> next;  // rank -> next expected line index
  std::map<int, bool> tail;
  for (const std::string& l : lines_of(s.out())) {
    int rank = -1, idx = -1;
    char rank_again[8] = {};
    if (std::sscanf(l.c_str(), "[rank %d] r%7[0-9]-line-%d ", &rank, rank_again, &idx) == 3) {
      CHECK_MESSAGE(std::to_string(rank) == rank_again, l);
      CHECK_MESSAGE(idx == next[rank], l);
      CHECK_MESSAGE(l.size() == l.find(' ', 9) + 33, l);
      next[rank] = idx + 1;
    } else if (std::sscanf(l.c_str(), "[rank %d] tail-", &rank) == 1) {
      CHECK_MESSAGE(l == "[rank " + std::to_string(rank) + "] tail-" + std::to_string(rank), l);
      tail[rank] = true;
    } else {
      FAIL_CHECK("unexpected stdout line: ", l);
    }
  }
  for (int r = 0; r < 3; ++r) {
    CHECK(next[r] == 300);
    CHECK(tail[r]);
  }
  std::vector<std::string> err;
  for (const std::string& l : lines_of(s.err()))
    if (l.rfind("kiln-run: setting OMP_NUM_THREADS=", 0) != 0) err.push_back(l);  // the launcher's own notice
  std::sort(err.begin(), err.end());
  CHECK(err == std::vector<std::string>{"[rank 0] oops 0", "[rank 1] oops 1", "[rank 2] oops 2"});
}

TEST_CASE("setting OMP_NUM_THREADS for the workers is said once, as torchrun does; a user's value is kept") {
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string restore = saved ? saved : "";
  ::unsetenv("OMP_NUM_THREADS");
  const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  const std::string share = std::to_string(std::max(1L, cores / 2));
  {
    Scratch s;
    REQUIRE(dist::launch(s.sh("echo \"omp=$OMP_NUM_THREADS\"", 2)) == 0);
    CHECK(lines_of(s.err()) ==
          std::vector<std::string>{"kiln-run: setting OMP_NUM_THREADS=" + share +
                                   " for each of the 2 workers (the node's cores shared out, as torchrun does); set "
                                   "OMP_NUM_THREADS to choose another number"});
    CHECK(s.out().find("[rank 1] omp=" + share + "\n") != std::string::npos);
  }
  {
    Scratch s;  // one worker: nothing set, nothing said
    REQUIRE(dist::launch(s.sh("echo \"omp=$OMP_NUM_THREADS\"", 1)) == 0);
    CHECK(s.err().empty());
    CHECK(s.out() == "[rank 0] omp=\n");
  }
  ::setenv("OMP_NUM_THREADS", "3", 1);
  {
    Scratch s;  // the user's choice: kept, nothing said
    REQUIRE(dist::launch(s.sh("echo \"omp=$OMP_NUM_THREADS\"", 2)) == 0);
    CHECK(s.err().empty());
    CHECK(s.out().find("[rank 0] omp=3\n") != std::string::npos);
  }
  if (saved) ::setenv("OMP_NUM_THREADS", restore.c_str(), 1);
  else ::unsetenv("OMP_NUM_THREADS");
}

TEST_CASE("a failing rank stops the others promptly and gives its exit code") {
  Scratch s;
  auto t0 = std::chrono::steady_clock::now();
  int rc = dist::launch(s.sh("if [ \"$RANK\" = 1 ]; then sleep 0.2; exit 3; fi; sleep 30", 3));
  CHECK(rc == 3);
  CHECK(seconds_since(t0) < 5.0);
  CHECK_MESSAGE(s.err().find("rank 1 (local rank 1") != std::string::npos, s.err());
  CHECK_MESSAGE(s.err().find("failed: exit code 3") != std::string::npos, s.err());
}

TEST_CASE("workers that ignore SIGTERM are killed after the grace period") {
  Scratch s;
  auto t0 = std::chrono::steady_clock::now();
  auto o = s.sh("if [ \"$RANK\" = 0 ]; then sleep 0.2; exit 4; fi; trap '' TERM; sleep 30", 2)
               .stop_grace(milliseconds(300));
  CHECK(dist::launch(o) == 4);
  double elapsed = seconds_since(t0);
  CHECK(elapsed >= 0.5);  // 0.2 s before the failure + the 0.3 s grace
  CHECK(elapsed < 5.0);
}

TEST_CASE("a rank killed by a signal gives 128 + signal") {
  Scratch s;
  CHECK(dist::launch(s.sh("if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; sleep 30", 2)) == 128 + 9);
  CHECK_MESSAGE(s.err().find("rank 1 (local rank 1") != std::string::npos, s.err());
  CHECK_MESSAGE(s.err().find("killed by SIGKILL (signal 9), status 137") != std::string::npos, s.err());
}

TEST_CASE("max_restarts restarts the whole group with KILN_RESTART_COUNT counting up") {
  Scratch s;
  SUBCASE("succeeds on the first restart") {
    auto o = s.sh("echo \"$KILN_RESTART_COUNT\" >> \"$0/runs.$RANK\"; test \"$KILN_RESTART_COUNT\" -ge 1", 2)
                 .max_restarts(2);
    CHECK(dist::launch(o) == 0);
    CHECK(lines_of(read_text(s.dir / "runs.1")).back() == "1");
    CHECK(lines_of(read_text(s.dir / "runs.0")).back() == "1");
    CHECK_MESSAGE(s.err().find("restart 1 of 2") != std::string::npos, s.err());
    CHECK(s.err().find("restart 2 of 2") == std::string::npos);
  }
  SUBCASE("gives up after max_restarts with the last failure's code") {
    auto o = s.sh("if [ \"$RANK\" = 0 ]; then echo \"$KILN_RESTART_COUNT\" >> \"$0/runs\"; exit 5; fi; sleep 30", 2)
                 .max_restarts(1);
    CHECK(dist::launch(o) == 5);
    CHECK(lines_of(read_text(s.dir / "runs")) == std::vector<std::string>{"0", "1"});
    CHECK_MESSAGE(s.err().find("restart 1 of 1") != std::string::npos, s.err());
  }
}

TEST_CASE("a program that cannot be executed gives 127 and names the program") {
  Scratch s;
  auto o = dist::LaunchOptions({"/nonexistent/kiln-prog", "--flag"}).nproc_per_node(2).stdout_fd(s.out_fd).stderr_fd(
      s.err_fd);
  CHECK(dist::launch(o) == 127);
  CHECK_MESSAGE(s.err().find("cannot run '/nonexistent/kiln-prog': No such file or directory") != std::string::npos,
                s.err());
}

TEST_CASE("invalid options are rejected with the offending value") {
  CHECK_ERROR_CONTAINS(dist::launch(dist::LaunchOptions()), "no program");
  CHECK_ERROR_CONTAINS(dist::launch(dist::LaunchOptions({"true"}).nproc_per_node(0)), "nproc_per_node", "got 0");
  CHECK_ERROR_CONTAINS(dist::launch(dist::LaunchOptions({"true"}).nnodes(2).node_rank(2)), "node_rank", "got 2");
  CHECK_ERROR_CONTAINS(dist::launch(dist::LaunchOptions({"true"}).master_port(70000)), "master_port", "70000");
  CHECK_ERROR_CONTAINS(dist::launch(dist::LaunchOptions({"true"}).max_restarts(-1)), "max_restarts", "-1");
  CHECK_ERROR_CONTAINS(dist::launch(dist::LaunchOptions({"true"}).standalone(true).nnodes(2)), "standalone", "2");
}

TEST_CASE("no zombies and no leaked file descriptors") {
  Scratch s;
  struct sigaction term_before {};
  ::sigaction(SIGTERM, nullptr, &term_before);
  int before = open_fd_count();
  CHECK(dist::launch(s.sh("echo hi", 3)) == 0);
  CHECK(dist::launch(s.sh("if [ \"$RANK\" = 2 ]; then exit 1; fi; sleep 30 & wait", 3)) == 1);
  CHECK(dist::launch(dist::LaunchOptions({"/nonexistent/kiln-prog"}).stderr_fd(s.err_fd)) == 127);
  CHECK(open_fd_count() == before);
  errno = 0;
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
  // The SIGTERM handler is the caller's again.
  struct sigaction term_after {};
  ::sigaction(SIGTERM, nullptr, &term_after);
  CHECK((term_after.sa_handler == term_before.sa_handler));
}

TEST_CASE("SIGTERM to the launcher is forwarded to the workers") {
  Scratch s;
  auto o = s.sh("trap 'echo got-term-$RANK; exit 0' TERM; touch \"$0/ready.$RANK\"; sleep 30 & wait", 2);
  pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) ::_exit(dist::launch(o));
  auto t0 = std::chrono::steady_clock::now();
  while (!(fs::exists(s.dir / "ready.0") && fs::exists(s.dir / "ready.1")) && seconds_since(t0) < 10)
    std::this_thread::sleep_for(milliseconds(10));
  ::kill(launcher, SIGTERM);
  int st = 0;
  REQUIRE(::waitpid(launcher, &st, 0) == launcher);
  CHECK(seconds_since(t0) < 5.0);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 128 + SIGTERM);
  auto out = lines_of(s.out());
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<std::string>{"[rank 0] got-term-0", "[rank 1] got-term-1"});
  CHECK_MESSAGE(s.err().find("received SIGTERM") != std::string::npos, s.err());
}
