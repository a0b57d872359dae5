// launch(): fork/exec the workers of one node, relay their output line by line with a rank
// prefix, watch for the first failure and stop or restart the group. One thread: a poll() loop
// over the workers' pipes and a self-pipe fed by the SIGINT/SIGTERM handler.
#include <kiln/parallel/launcher.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <kiln/core/error.h>

extern char** environ;

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxLine = 64 * 1024;  // a longer line without '\n' is relayed in pieces

// Writes everything, retrying on EINTR; a closed reader loses the text (SIGPIPE is ignored).
void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

// "exit code 3" or "killed by SIGKILL (signal 9), status 137" from a waitpid() status.
std::string describe_wait_status(int st) {
  if (!WIFSIGNALED(st)) return detail::str_cat("exit code ", WEXITSTATUS(st));
  int sig = WTERMSIG(st);
  const char* name = sigabbrev_np(sig);
  return detail::str_cat("killed by SIG", name ? name : "?", " (signal ", sig, "), status ", 128 + sig);
}

// Self-pipe for SIGINT/SIGTERM: the handler writes the signal number, the loop reads it.
int g_signal_pipe_write = -1;

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe_write, &b, 1);
  errno = saved;
}

// Installs the handlers for one launch() and restores the previous ones after it.
class SignalGuard {
 public:
  SignalGuard() {
    KILN_CHECK(::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) == 0, "launch: pipe2 failed: ", std::strerror(errno));
    g_signal_pipe_write = fds_[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &old_pipe_);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    g_signal_pipe_write = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  int read_fd() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
  struct sigaction old_int_ {}, old_term_ {}, old_pipe_ {};
};

// One worker process: its pid (also its process group), and its stdout/stderr pipes.
struct Worker {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int fd[2] = {-1, -1};  // read ends: [0] stdout, [1] stderr
  std::string pending[2];
};

class Group {
 public:
  Group(const LaunchOptions& o, int port, int restart, int signal_fd)
      : o_(o), port_(port), restart_(restart), signal_fd_(signal_fd) {}
  ~Group() {
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
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  void start();
  // Runs until every worker has exited. Returns 0 or the first failure's status (128 + the
  // signal the launcher received, when it did); failure() describes it ("rank 1 failed: ...").
  int wait();
  const std::string& failure() const { return failure_; }
  int stop_signal() const { return stop_signal_; }

 private:
  std::vector<std::string> environment(const Worker& w) const;
  void spawn(Worker& w);
  void relay(Worker& w, int stream, bool eof);
  void read_pipe(Worker& w, int stream);
  void signal_all(int sig);
  void stop(int sig);

  const LaunchOptions& o_;
  int port_, restart_, signal_fd_;
  std::vector<Worker> workers_;
  int failure_status_ = 0, stop_signal_ = 0;
  std::string failure_;
  std::optional<Clock::time_point> kill_at_;
  bool killed_ = false;
};

std::vector<std::string> Group::environment(const Worker& w) const {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(w.rank)},
      {"LOCAL_RANK", std::to_string(w.local_rank)},
      {"WORLD_SIZE", std::to_string(o_.nproc_per_node_ * o_.nnodes_)},
      {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc_per_node_)},
      {"GROUP_RANK", std::to_string(o_.node_rank_)},
      {"GROUP_WORLD_SIZE", std::to_string(o_.nnodes_)},
      {"MASTER_ADDR", o_.standalone_ ? std::string("127.0.0.1") : o_.master_addr_},
      {"MASTER_PORT", std::to_string(port_)},
      {"KILN_RESTART_COUNT", std::to_string(restart_)},
      {"KILN_MAX_RESTARTS", std::to_string(o_.max_restarts_)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o_.max_restarts_)},
  };
  // Like torchrun: several workers on one node share its cores, so unless the user chose, each
  // gets an equal share of OpenMP threads instead of all of them (which oversubscribes).
  if (o_.nproc_per_node_ > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    vars.push_back({"OMP_NUM_THREADS", std::to_string(std::max(1L, cores / o_.nproc_per_node_))});
  }
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

void Group::spawn(Worker& w) {
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
  // Signals stay blocked across fork() so the child never runs the launcher's handler; it resets
  // the dispositions and unblocks everything before exec.
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
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

void Group::start() {
  int n = o_.nproc_per_node_;
  workers_.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    workers_[size_t(i)].local_rank = i;
    workers_[size_t(i)].rank = o_.node_rank_ * n + i;
  }
  for (Worker& w : workers_) spawn(w);
}

// Emits every complete line of the worker's pending text, each in one write(); at EOF also the
// unterminated tail.
void Group::relay(Worker& w, int stream, bool eof) {
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

void Group::read_pipe(Worker& w, int stream) {
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
void Group::signal_all(int sig) {
  for (const Worker& w : workers_)
    if (w.pid > 0) ::kill(-w.pid, sig);
}

void Group::stop(int sig) {
  signal_all(sig);
  if (!kill_at_) kill_at_ = Clock::now() + o_.stop_grace_;
}

int Group::wait() {
  auto any_running = [&] { return std::any_of(workers_.begin(), workers_.end(), [](auto& w) { return w.running; }); };
  while (any_running()) {
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
      write_all(o_.stderr_fd_, detail::str_cat("kiln-run: received SIG", sigabbrev_np(sig), "; stopping the workers\n"));
      stop(sig);
    }
    for (Worker& w : workers_)
      for (int s = 0; s < 2; ++s) read_pipe(w, s);
    for (Worker& w : workers_) {
      int st = 0;
      if (!w.running || ::waitpid(w.pid, &st, WNOHANG) != w.pid) continue;
      w.running = false;
      int status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
      if (status != 0 && failure_status_ == 0 && stop_signal_ == 0) {
        failure_status_ = status;
        failure_ = detail::str_cat("rank ", w.rank, " (local rank ", w.local_rank, ", pid ", w.pid, ") failed: ",
                                   describe_wait_status(st));
        stop(SIGTERM);
      }
    }
    if (kill_at_ && !killed_ && Clock::now() >= *kill_at_) {
      signal_all(SIGKILL);
      killed_ = true;
    }
  }
  // Every worker is reaped: relay what they wrote and close the pipes, even if a lingering child
  // of a worker still holds the write end.
  for (Worker& w : workers_)
    for (int s = 0; s < 2; ++s) {
      read_pipe(w, s);
      if (w.fd[s] >= 0) {
        relay(w, s, true);
        ::close(w.fd[s]);
        w.fd[s] = -1;
      }
    }
  if (stop_signal_ != 0) return 128 + stop_signal_;
  return failure_status_;
}

void validate(const LaunchOptions& o) {
  KILN_CHECK(!o.command_.empty() && !o.command_[0].empty(), "launch: no program to run");
  KILN_CHECK(o.nproc_per_node_ >= 1, "launch: nproc_per_node must be at least 1, got ", o.nproc_per_node_);
  KILN_CHECK(o.nnodes_ >= 1, "launch: nnodes must be at least 1, got ", o.nnodes_);
  KILN_CHECK(o.node_rank_ >= 0 && o.node_rank_ < o.nnodes_, "launch: node_rank must be in [0, ", o.nnodes_,
             "), got ", o.node_rank_);
  KILN_CHECK(!o.standalone_ || o.nnodes_ == 1, "launch: standalone runs one node, got nnodes ", o.nnodes_);
  KILN_CHECK(o.standalone_ || (o.master_port_ >= 1 && o.master_port_ <= 65535),
             "launch: master_port must be in [1, 65535], got ", o.master_port_);
  KILN_CHECK(o.standalone_ || !o.master_addr_.empty(), "launch: master_addr is empty");
  KILN_CHECK(o.max_restarts_ >= 0, "launch: max_restarts must be at least 0, got ", o.max_restarts_);
  KILN_CHECK(o.monitor_interval_.count() > 0, "launch: monitor_interval must be positive, got ",
             o.monitor_interval_.count(), " ms");
  KILN_CHECK(o.stop_grace_.count() >= 0, "launch: stop_grace must be at least 0, got ", o.stop_grace_.count(),
             " ms");
}

}  // namespace

int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  KILN_CHECK(fd >= 0, "pick_free_port: socket failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // port 0: the kernel picks one
  socklen_t len = sizeof addr;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int e = errno;
  ::close(fd);
  KILN_CHECK(ok, "pick_free_port: could not bind a port on 127.0.0.1: ", std::strerror(e));
  return ntohs(addr.sin_port);
}

int launch(const LaunchOptions& options) {
  validate(options);
  int port = options.standalone_ ? pick_free_port() : options.master_port_;
  SignalGuard signals;
  for (int restart = 0;; ++restart) {
    Group group(options, port, restart, signals.read_fd());
    group.start();
    int status = group.wait();
    if (status == 0) return 0;
    if (group.stop_signal() != 0) return status;
    const std::string& failure = group.failure();
    if (restart < options.max_restarts_) {
      write_all(options.stderr_fd_, detail::str_cat("kiln-run: ", failure, "; restarting all ",
                                                    options.nproc_per_node_, " workers (restart ", restart + 1,
                                                    " of ", options.max_restarts_, ")\n"));
      continue;
    }
    write_all(options.stderr_fd_, "kiln-run: " + failure + "\n");
    return status;
  }
}

}  // namespace kiln::dist
