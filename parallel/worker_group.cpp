// WorkerGroup (worker_group.h): fork/exec one node's workers, relay their output with a rank
// prefix, watch for the first failure and stop the group. One thread: a poll() loop over the
// workers' pipes and a self-pipe fed by the SIGINT/SIGTERM handler.
#include "worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <kiln/core/error.h>

extern char** environ;

namespace kiln::dist::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxLine = 64 * 1024;  // a longer line without '\n' is relayed in pieces

int g_signal_pipe_write = -1;

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe_write, &b, 1);
  errno = saved;
}

}  // namespace

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

std::string describe_wait_status(int st) {
  if (!WIFSIGNALED(st)) return kiln::detail::str_cat("exit code ", WEXITSTATUS(st));
  int sig = WTERMSIG(st);
  const char* name = sigabbrev_np(sig);
  return kiln::detail::str_cat("killed by SIG", name ? name : "?", " (signal ", sig, "), status ", 128 + sig);
}

struct SignalGuard::Saved {
  struct sigaction int_ {}, term_ {}, pipe_ {};
};

SignalGuard::SignalGuard() : saved_(new Saved) {
  KILN_CHECK(::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) == 0, "launch: pipe2 failed: ", std::strerror(errno));
  g_signal_pipe_write = fds_[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &saved_->int_);
  sigaction(SIGTERM, &sa, &saved_->term_);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, &saved_->pipe_);
}

SignalGuard::~SignalGuard() {
  sigaction(SIGINT, &saved_->int_, nullptr);
  sigaction(SIGTERM, &saved_->term_, nullptr);
  sigaction(SIGPIPE, &saved_->pipe_, nullptr);
  g_signal_pipe_write = -1;
  ::close(fds_[0]);
  ::close(fds_[1]);
  delete saved_;
}

WorkerGroup::WorkerGroup(const LaunchOptions& o, WorkerEnv env, int signal_fd)
    : o_(o), env_(std::move(env)), signal_fd_(signal_fd) {}

WorkerGroup::~WorkerGroup() {
  // Only reached with workers left on an exception path: never leave them running or unreaped.
  for (Worker& w : workers_) {
    if (w.running) {
      ::kill(-w.pid, SIGKILL);
      ::waitpid(w.pid, nullptr, 0);
    }
    for (int& fd : w.fd)
      if (fd >= 0) ::close(fd);
  }
}

// Like torchrun: several workers on one node share its cores, so unless the user chose, each gets
// an equal share of OpenMP threads instead of all of them (which oversubscribes). The value kiln-run
// sets, or "" when it sets none.
std::string WorkerGroup::default_omp_threads() const {
  if (o_.nproc_per_node_ <= 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return "";
  long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  return std::to_string(std::max(1L, cores / o_.nproc_per_node_));
}

std::vector<std::string> WorkerGroup::environment(const Worker& w) const {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(w.rank)},
      {"LOCAL_RANK", std::to_string(w.local_rank)},
      {"WORLD_SIZE", std::to_string(env_.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc_per_node_)},
      {"GROUP_RANK", std::to_string(env_.group_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(env_.group_world_size)},
      {"MASTER_ADDR", env_.master_addr},
      {"MASTER_PORT", std::to_string(env_.master_port)},
      {"KILN_RESTART_COUNT", std::to_string(env_.restart_count)},
      {"KILN_MAX_RESTARTS", std::to_string(o_.max_restarts_)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(env_.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o_.max_restarts_)},
  };
  vars.insert(vars.end(), env_.extra.begin(), env_.extra.end());
  if (std::string t = default_omp_threads(); !t.empty()) vars.push_back({"OMP_NUM_THREADS", t});
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& v : vars) replaced = replaced || v.first == key;
    if (!replaced) env.push_back(std::move(kv));
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

void WorkerGroup::spawn(Worker& w) {
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> env = environment(w);
  std::vector<char*> argv, envp;
  for (const std::string& a : o_.command_) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exec_error = "kiln-run: cannot run '" + o_.command_[0] + "': ";

  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    for (int fd : {out[0], out[1]}) ::close(fd);
    KILN_FAIL_DIST("launch: pipe2 failed for rank ", w.rank, ": ", std::strerror(e));
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  // Signals stay blocked across fork() so the child never runs the launcher's handler; it resets
  // the dispositions and unblocks everything before exec.
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    // A launcher killed outright (SIGKILL, OOM) takes its workers along instead of orphaning them
    // in collectives their peers will time out on; checked again in case it died already.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM}) ::sigaction(sig, &dfl, nullptr);
    // SIGPIPE stays ignored, as in Python (and so in every torchrun worker): a write to a dead
    // peer's socket fails with EPIPE, which the collective reports naming the peer, instead of
    // killing the worker with a signal that hides which rank died first.
    dfl.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    const char* why = e == ENOENT ? "No such file or directory"
                      : e == EACCES ? "Permission denied"
                      : e == ENOEXEC ? "Exec format error"
                                     : "exec failed";
    [[maybe_unused]] ssize_t n = ::write(2, exec_error.data(), exec_error.size());
    n = ::write(2, why, std::strlen(why));
    n = ::write(2, "\n", 1);
    ::_exit(127);
  }
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (devnull >= 0) ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]), ::close(err[0]);
    KILN_FAIL_DIST("launch: fork failed for rank ", w.rank, ": ", std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also in the parent, so signal_all() never races the child's setpgid
  w.pid = pid;
  w.running = true;
  w.fd[0] = out[0];
  w.fd[1] = err[0];
  for (int fd : w.fd) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void WorkerGroup::start() {
  int n = o_.nproc_per_node_;
  workers_.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    workers_[size_t(i)].local_rank = i;
    workers_[size_t(i)].rank = env_.rank_offset + i;
  }
  // Said once per launch, as torchrun does, so a slow run is not a mystery.
  if (std::string t = default_omp_threads(); !t.empty() && env_.restart_count == 0)
    write_all(o_.stderr_fd_, kiln::detail::str_cat("kiln-run: setting OMP_NUM_THREADS=", t, " for each of the ", n,
                                                   " workers (the node's cores shared out, as torchrun does); set "
                                                   "OMP_NUM_THREADS to choose another number\n"));
  for (Worker& w : workers_) spawn(w);
}

// Emits every complete line of the worker's pending text, each in one write(); at EOF also the
// unterminated tail.
void WorkerGroup::relay(Worker& w, int stream, bool eof) {
  std::string& buf = w.pending[stream];
  int fd = stream == 0 ? o_.stdout_fd_ : o_.stderr_fd_;
  std::string prefix = "[rank " + std::to_string(w.rank) + "] ";
  size_t start = 0;
  while (true) {
    size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) {
      if (buf.size() - start >= kMaxLine || (eof && start < buf.size())) nl = buf.size();
      else break;
    }
    std::string line = prefix;
    line.append(buf, start, nl - start);
    line.push_back('\n');
    write_all(fd, line);
    start = std::min(nl + 1, buf.size());
  }
  buf.erase(0, start);
}

void WorkerGroup::read_pipe(Worker& w, int stream) {
  int& fd = w.fd[stream];
  char chunk[16384];
  while (fd >= 0) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more for now
    if (n == 0) {
      relay(w, stream, true);
      ::close(fd);
      fd = -1;
      return;
    }
    w.pending[stream].append(chunk, size_t(n));
    relay(w, stream, false);
  }
}

// Signals each worker's process group (also exited workers: their children may linger).
void WorkerGroup::signal_all(int sig) {
  for (const Worker& w : workers_)
    if (w.pid > 0) ::kill(-w.pid, sig);
}

void WorkerGroup::stop(int sig) {
  stopping_ = true;
  signal_all(sig);
  if (!kill_at_) kill_at_ = Clock::now() + o_.stop_grace_;
}

bool WorkerGroup::poll() {
  auto any_running = [&] { return std::any_of(workers_.begin(), workers_.end(), [](auto& w) { return w.running; }); };
  if (!any_running()) {
    drain();
    return false;
  }
  std::vector<pollfd> fds = {{signal_fd_, POLLIN, 0}};
  for (const Worker& w : workers_)
    for (int fd : w.fd)
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  auto timeout = o_.monitor_interval_;
  if (kill_at_ && !killed_)
    timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now()));
  ::poll(fds.data(), fds.size(), int(std::max<int64_t>(0, timeout.count())));

  unsigned char sig;
  while (::read(signal_fd_, &sig, 1) == 1) {
    if (stop_signal_ != 0) continue;
    stop_signal_ = sig;
    write_all(o_.stderr_fd_, kiln::detail::str_cat("kiln-run: received SIG", sigabbrev_np(sig),
                                                   "; stopping the workers\n"));
    stop(sig);
  }
  for (Worker& w : workers_)
    for (int s = 0; s < 2; ++s) read_pipe(w, s);
  for (Worker& w : workers_) {
    int st = 0;
    if (!w.running || ::waitpid(w.pid, &st, WNOHANG) != w.pid) continue;
    w.running = false;
    int status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
    if (status != 0 && failure_status_ == 0 && !stopping_) {
      failure_status_ = status;
      failed_rank_ = w.rank;
      failure_ = kiln::detail::str_cat("rank ", w.rank, " (local rank ", w.local_rank, ", pid ", w.pid, ") failed: ",
                                       describe_wait_status(st));
      stop(SIGTERM);
    }
  }
  if (kill_at_ && !killed_ && Clock::now() >= *kill_at_) {
    signal_all(SIGKILL);
    killed_ = true;
  }
  if (any_running()) return true;
  drain();
  return false;
}

// Every worker is reaped: relay what they wrote and close the pipes, even if a lingering child
// of a worker still holds the write end.
void WorkerGroup::drain() {
  if (drained_) return;
  drained_ = true;
  for (Worker& w : workers_)
    for (int s = 0; s < 2; ++s) {
      read_pipe(w, s);
      if (w.fd[s] >= 0) {
        relay(w, s, true);
        ::close(w.fd[s]);
        w.fd[s] = -1;
      }
    }
}

}  // namespace kiln::dist::detail
